"""TF Serving's config files (issue 30, item 2): models.config and batching_parameters.txt, as
training writes them and as templates/serving/ uses them, parsed as the model server parses
them (text-format protobufs)."""
from __future__ import annotations

import os
import re

import pytest
import yaml

from tests.helpers import ROOT
from training.config import ConfigError
from training.exporting import serving_config

SERVING = os.path.join(ROOT, "templates", "serving")


def _model_server_config(text: str):
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2
    return text_format.Parse(text, model_server_config_pb2.ModelServerConfig())


def _batching_parameters(text: str):
    """tensorflow-serving-api's wheel does not ship BatchingParameters (its proto lives in
    tensorflow_serving/servables/tensorflow/session_bundle_config.proto): the message is built
    here from that definition's field names, numbers and types."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format, wrappers_pb2
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    f = descriptor_pb2.FileDescriptorProto(
        name="session_bundle_config.proto", package="tensorflow.serving", syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"])
    m = f.message_type.add(name="BatchingParameters")
    F = descriptor_pb2.FieldDescriptorProto
    for number, name, kind in ((1, "max_batch_size", ".google.protobuf.Int64Value"),
                               (2, "batch_timeout_micros", ".google.protobuf.Int64Value"),
                               (3, "max_enqueued_batches", ".google.protobuf.Int64Value"),
                               (4, "num_batch_threads", ".google.protobuf.Int64Value"),
                               (5, "thread_pool_name", ".google.protobuf.StringValue")):
        m.field.add(name=name, number=number, type=F.TYPE_MESSAGE, type_name=kind,
                    label=F.LABEL_OPTIONAL)
    m.field.add(name="allowed_batch_sizes", number=6, type=F.TYPE_INT64, label=F.LABEL_REPEATED)
    m.field.add(name="pad_variable_length_inputs", number=7, type=F.TYPE_BOOL,
                label=F.LABEL_OPTIONAL)
    pool.Add(f)
    cls = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))
    return text_format.Parse(text, cls())


def _check_batching(text: str) -> None:
    parsed = _batching_parameters(text)
    b = serving_config.BATCHING
    assert (parsed.max_batch_size.value, parsed.batch_timeout_micros.value,
            parsed.num_batch_threads.value, parsed.max_enqueued_batches.value) == (
        b.max_batch_size, b.batch_timeout_micros, b.num_batch_threads, b.max_enqueued_batches)


def _check_models(text: str, base_path: str, name: str = "model") -> None:
    parsed = _model_server_config(text)
    [model] = parsed.model_config_list.config
    assert model.name == name and model.base_path == base_path
    assert model.model_platform == "tensorflow"
    assert model.model_version_policy.WhichOneof("policy_choice") == "latest"
    assert model.model_version_policy.latest.num_versions == 2


def test_training_writes_both_files_for_its_export(trained):
    _, job_dir, metrics = trained
    paths = metrics["serving_config"]
    assert os.path.dirname(paths["models_config"]) == os.path.join(job_dir, "serving")
    export_base = os.path.dirname(metrics["export_dir"])
    _check_models(open(paths["models_config"]).read(), os.path.abspath(export_base))
    # The base path's children are the versions TF Serving will find: numeric, complete.
    versions = [v for v in os.listdir(export_base) if v.isdigit()]
    assert os.path.basename(metrics["export_dir"]) in versions
    _check_batching(open(paths["batching_parameters"]).read())


def test_names_and_paths_survive_the_text_format(tmp_path):
    odd = str(tmp_path / 'models "quoted" \\ dir')
    paths = serving_config.write_serving_config(str(tmp_path / "s"), "taxi-fare.v2", odd)
    _check_models(open(paths["models_config"]).read(), odd, name="taxi-fare.v2")
    with pytest.raises(ValueError, match="control character"):
        serving_config.models_config_text("m", "/a\nb")
    with pytest.raises(ValueError, match="letters, digits"):
        serving_config.models_config_text("my model", "/a")
    with pytest.raises(ValueError, match="max_batch_size"):
        serving_config.Batching(0, 0, 1, 1)


def test_bad_model_name_is_a_config_error():
    from training.config import TrainConfig
    with pytest.raises(ConfigError, match="--serving_model_name"):
        TrainConfig(data_dir="d", job_dir="j", serving_model_name="a/b")


def test_committed_container_config_is_what_training_writes():
    read = lambda name: open(os.path.join(SERVING, name)).read()  # noqa: E731
    assert read("models.config") == serving_config.models_config_text("model", "/models/model")
    assert read("batching_parameters.txt") == serving_config.batching_text()
    _check_models(read("models.config"), "/models/model")
    docker = read("Dockerfile")
    assert re.search(r"^FROM tensorflow/serving:\d+\.\d+\.\d+$", docker, re.M)
    assert "COPY ${EXPORT} /models/model" in docker
    for flag in ("--model_config_file=/models/config/models.config", "--enable_batching=true",
                 "--batching_parameters_file=/models/config/batching_parameters.txt"):
        assert flag in docker


def test_kubernetes_manifest_mounts_configs_the_server_parses():
    docs = list(yaml.safe_load_all(open(os.path.join(SERVING, "serving.yaml"))))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"ConfigMap", "Deployment", "Service"}
    data = kinds["ConfigMap"]["data"]
    _check_models(data["models.config"], "gs://BUCKET/job/export")
    assert data["batching_parameters.txt"] == serving_config.batching_text()
    _check_batching(data["batching_parameters.txt"])
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    docker_image = re.search(r"^FROM (\S+)$", open(os.path.join(SERVING, "Dockerfile")).read(),
                             re.M).group(1)
    assert container["image"] == docker_image
    [mount] = container["volumeMounts"]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == kinds["ConfigMap"]["metadata"]["name"]
    flags = dict(a.lstrip("-").split("=", 1) for a in container["args"])
    for flag, key in (("model_config_file", "models.config"),
                      ("batching_parameters_file", "batching_parameters.txt")):
        assert flags[flag] == os.path.join(mount["mountPath"], key)
    assert flags["enable_batching"] == "true"
    ports = {p["containerPort"] for p in container["ports"]}
    assert ports == {int(flags["port"]), int(flags["rest_api_port"])}
    assert {p["targetPort"] for p in kinds["Service"]["spec"]["ports"]} == ports
    assert container["readinessProbe"]["httpGet"]["path"] == "/v1/models/model"


def test_the_templates_serve_the_tf_serving_release_the_op_check_names():
    """templates/serving/ runs the release whose TF-DF ops the exports are checked against."""
    from preprocessing.files import serving_ops
    image = re.search(r"^FROM tensorflow/serving:(\S+)$",
                      open(os.path.join(SERVING, "Dockerfile")).read(), re.M).group(1)
    assert image == serving_ops.TF_SERVING_VERSION
    major_minor = tuple(int(x) for x in image.split(".")[:2])
    assert major_minor >= tuple(int(x) for x in serving_ops.TF_SERVING_MIN_VERSION.split("."))
    for path in ("Dockerfile", "serving.yaml", "vertex_model.json"):
        text = open(os.path.join(SERVING, path)).read().lower()
        assert "wide_deep" not in text and "cannot" not in text, path


def test_vertex_model_upload_is_a_model_the_api_takes_running_the_same_server():
    from google.cloud.aiplatform_v1.types import Model
    text = open(os.path.join(SERVING, "vertex_model.json")).read()
    model = Model.from_json(text)  # unknown or misspelt fields raise
    spec = model.container_spec
    assert spec.image_uri.endswith(":" + re.search(
        r"^FROM tensorflow/serving:(\S+)$", open(os.path.join(SERVING, "Dockerfile")).read(),
        re.M).group(1))
    assert list(spec.command) == ["tensorflow_model_server"]
    flags = dict(a.lstrip("-").split("=", 1) for a in spec.args)
    # Vertex sends requests and health checks to the first port: the REST port.
    assert [p.container_port for p in spec.ports] == [int(flags["rest_api_port"])]
    assert spec.predict_route == f"/v1/models/{flags['model_name']}:predict"
    assert spec.health_route == f"/v1/models/{flags['model_name']}"
    assert flags["model_base_path"] == "$(AIP_STORAGE_URI)"
    assert model.artifact_uri.startswith("gs://")
    # The batching file is the one the Dockerfile's image holds.
    docker = open(os.path.join(SERVING, "Dockerfile")).read()
    assert f"--batching_parameters_file={flags['batching_parameters_file']}" in docker
