"""A local stand-in for the Pub/Sub gRPC API, for tests only.

No Pub/Sub emulator can be installed on these machines (it ships only with the gcloud SDK),
so this implements just the RPCs that the real `google-cloud-pubsub` client makes when Beam's
ReadFromPubSub / WriteToPubSub run on the DirectRunner, plus topic creation for the tests:
Publisher.CreateTopic/Publish, Subscriber.CreateSubscription/Pull/Acknowledge/
ModifyAckDeadline/DeleteSubscription. Messages published to a topic are copied to each of its
subscriptions; a pulled message stays outstanding until acknowledged. Clients reach it through
PUBSUB_EMULATOR_HOST, exactly as they would reach the gcloud emulator.
"""
from __future__ import annotations

import collections
import itertools
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import empty_pb2, timestamp_pb2
from google.pubsub_v1 import types


class FakePubSub:
    def __init__(self):
        self.lock = threading.Lock()
        self.topics = {}          # topic -> [subscription names]
        self.subs = {}            # subscription -> {"topic", "queue": deque, "outstanding": {}}
        self.ids = itertools.count(1)
        self.server = None
        self.port = None

    # ---- Publisher ---------------------------------------------------------------------------
    def create_topic(self, request: types.Topic, context):
        with self.lock:
            if request.name in self.topics:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"{request.name} exists")
            self.topics[request.name] = []
        return request

    def publish(self, request: types.PublishRequest, context):
        with self.lock:
            if request.topic not in self.topics:
                context.abort(grpc.StatusCode.NOT_FOUND, f"topic {request.topic} not found")
            ids = []
            for m in request.messages:
                mid = str(next(self.ids))
                ts = timestamp_pb2.Timestamp()
                ts.GetCurrentTime()
                stored = types.PubsubMessage(data=m.data, attributes=dict(m.attributes),
                                             message_id=mid, publish_time=ts.ToDatetime())
                for sub in self.topics[request.topic]:
                    self.subs[sub]["queue"].append(stored)
                ids.append(mid)
        return types.PublishResponse(message_ids=ids)

    # ---- Subscriber --------------------------------------------------------------------------
    def create_subscription(self, request: types.Subscription, context):
        with self.lock:
            if request.topic not in self.topics:
                context.abort(grpc.StatusCode.NOT_FOUND, f"topic {request.topic} not found")
            if request.name in self.subs:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"{request.name} exists")
            self.subs[request.name] = {"topic": request.topic, "queue": collections.deque(),
                                       "outstanding": {}}
            self.topics[request.topic].append(request.name)
        return request

    def pull(self, request: types.PullRequest, context):
        deadline = time.time() + 1.0  # a short long-poll, like the service's
        while True:
            with self.lock:
                sub = self.subs.get(request.subscription)
                if sub is None:
                    context.abort(grpc.StatusCode.NOT_FOUND, "subscription not found")
                received = []
                while sub["queue"] and len(received) < max(1, request.max_messages):
                    m = sub["queue"].popleft()
                    ack_id = f"ack-{next(self.ids)}"
                    sub["outstanding"][ack_id] = m
                    received.append(types.ReceivedMessage(ack_id=ack_id, message=m))
            if received or time.time() > deadline:
                return types.PullResponse(received_messages=received)
            time.sleep(0.05)

    def acknowledge(self, request: types.AcknowledgeRequest, context):
        with self.lock:
            sub = self.subs.get(request.subscription)
            if sub is not None:
                for a in request.ack_ids:
                    sub["outstanding"].pop(a, None)
        return empty_pb2.Empty()

    def modify_ack_deadline(self, request: types.ModifyAckDeadlineRequest, context):
        return empty_pb2.Empty()

    def delete_subscription(self, request: types.DeleteSubscriptionRequest, context):
        with self.lock:
            sub = self.subs.pop(request.subscription, None)
            if sub is not None:
                self.topics.get(sub["topic"], []).remove(request.subscription)
        return empty_pb2.Empty()

    # ---- server ------------------------------------------------------------------------------
    def start(self, port: int = 0) -> str:
        def rpc(fn, req, resp):
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.deserialize,
                response_serializer=(resp.SerializeToString if resp is empty_pb2.Empty
                                     else resp.serialize))

        publisher = grpc.method_handlers_generic_handler("google.pubsub.v1.Publisher", {
            "CreateTopic": rpc(self.create_topic, types.Topic, types.Topic),
            "Publish": rpc(self.publish, types.PublishRequest, types.PublishResponse),
        })
        subscriber = grpc.method_handlers_generic_handler("google.pubsub.v1.Subscriber", {
            "CreateSubscription": rpc(self.create_subscription, types.Subscription,
                                      types.Subscription),
            "Pull": rpc(self.pull, types.PullRequest, types.PullResponse),
            "Acknowledge": rpc(self.acknowledge, types.AcknowledgeRequest, empty_pb2.Empty),
            "ModifyAckDeadline": rpc(self.modify_ack_deadline, types.ModifyAckDeadlineRequest,
                                     empty_pb2.Empty),
            "DeleteSubscription": rpc(self.delete_subscription,
                                      types.DeleteSubscriptionRequest, empty_pb2.Empty),
        })
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers((publisher, subscriber))
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()
        return f"127.0.0.1:{self.port}"

    def stop(self):
        if self.server:
            self.server.stop(grace=1)
