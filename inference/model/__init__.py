"""The model a prediction job serves: the RunInference handler over `tf.saved_model.load`, the
loaded version and its hot reload, export versions, the gate and the shadow model.
"""
