"""Keras applications' ResNet50 and MobileNetV2 in TensorFlow (oneDNN on: TF_ENABLE_ONEDNN_OPTS=1
is set here before TensorFlow loads), timed like `tower bench`: prints one JSON line
(images_per_sec = median of timed windows after warm-up; peak_rss_mb). Training is a compiled
train step (forward, backward, SGD with momentum 0.9), inference a compiled predict step.
Keras's versions are the architectures' own, not torchvision's: its ResNet50 is v1 (the stride on
the first 1x1) with biases on the convolutions; its parameter count is printed.

usage: imagenet_models_tensorflow.py --model resnet50|mobilenet_v2 --threads T --mode train|infer
"""
import argparse
import json
import os
import resource
import statistics
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

MODELS = {"resnet50": "ResNet50", "mobilenet_v2": "MobileNetV2"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", default="train")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--windows", type=int, default=3)
    a = p.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.random.set_seed(0)
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
    for _ in range(2):
        step().numpy()
    windows = []
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            out = step()
        out.numpy()
        windows.append((time.perf_counter() - t0) / a.steps)
    sec = statistics.median(windows)
    print(json.dumps({"peer": "tensorflow " + tf.__version__, "model": a.model, "mode": a.mode,
                      "threads": a.threads, "batch_size": a.batch_size,
                      "parameters": int(model.count_params()),
                      "images_per_sec": a.batch_size / sec,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
