"""Keras applications' ResNet50 and MobileNetV2 in TensorFlow (oneDNN on: TF_ENABLE_ONEDNN_OPTS=1
is set here before TensorFlow loads), timed like `tower bench`: prints one JSON line
(images_per_sec = median of timed windows after warm-up; peak_rss_mb). Training is a compiled
train step (forward, backward, SGD with momentum 0.9), inference a compiled predict step.
Keras's versions are the architectures' own, not torchvision's: its ResNet50 is v1 (the stride on
the first 1x1) with biases on the convolutions; its parameter count is printed.

usage: imagenet_models_tensorflow.py --model resnet50|mobilenet_v2 --threads T --mode train|infer
"""
import os

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from peer_timing import parse_flags, report  # noqa: E402

MODELS = {"resnet50": "ResNet50", "mobilenet_v2": "MobileNetV2"}


def main():
    a = parse_flags()
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.random.set_seed(0)
    if a.precision == "bf16":
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    build = getattr(tf.keras.applications, MODELS[a.model])
    model = build(weights=None, classes=a.classes,
                  input_shape=(a.image_size, a.image_size, 3))
    x = tf.constant(np.random.default_rng(0).standard_normal(
        (a.batch_size, a.image_size, a.image_size, 3), dtype=np.float32))
    y = tf.constant(np.arange(a.batch_size) % a.classes)
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()

    @tf.function(jit_compile=False)
    def train_step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function(jit_compile=False)
    def infer_step():
        return model(x, training=False)

    step = train_step if a.mode == "train" else infer_step
    report(a, "tensorflow " + tf.__version__, step, finish=lambda out: out.numpy(),
           parameters=int(model.count_params()))


if __name__ == "__main__":
    main()
