"""The default `tower train` run re-done in TensorFlow 2.x with Keras, for a speed and accuracy
comparison on this machine (bench/e2e/fashion_mnist_vs_tensorflow.sh runs both, interleaved).

The twin of src/tower/models/lenet.cc and its recipe (fashion_mnist_recipe in model.cc):
  - network, NHWC 28x28x1: conv 5x5x32 (SAME) + relu, max-pool 2x2/2 (VALID), conv 3x3x64 (SAME)
    + relu, max-pool 2x2/2, flatten, dense 256 + relu, dense 10 (logits); He-normal kernels
    (truncated normal, stddev sqrt(2 / fan_in) / 0.8796) for the convolutions and fc 256,
    Glorot-uniform for the logits, zero biases (tower's layer defaults; Keras's HeNormal and
    GlorotUniform are the same distributions, drawn from another random stream);
  - loss: mean sparse softmax cross-entropy, no weight decay;
  - Adam (beta1 0.9, beta2 0.999, epsilon 1e-8: Keras's default epsilon is 1e-7) at 3e-3 with a
    linear warm-up from 0 over 50 steps, then cosine decay to 0 (Keras's CosineDecay with
    warmup_target: the same formula as tower's "cosine:warmup_steps=50"; the step is the
    optimizer's 0-based iteration, as in tower). A warm-up not shorter than the run is cut to
    half the run, as tower does;
  - global batch 128 (tower: 2 towers x 64), steps per epoch = 60000 // 128 (the partial batch is
    dropped), total steps = ceil(epochs * steps per epoch), a fresh permutation every epoch;
  - a moving average of the trainable weights after every step with TensorFlow's num_updates
    rule, decay = min(0.9999, (1 + n) / (10 + n)), n = the steps done including this one (as
    tf.train.ExponentialMovingAverage with num_updates = the global step after the update),
    written out in the train step (Keras's own use_ema has no num_updates rule); the shadows
    start as the initial weights;
  - pixels scaled to [0, 1]; the test accuracy on the 10,000 test images with the averaged
    weights.

The train step is one tf.function (fixed input signature), traced before the loop (tower builds
its program before its loop too). Threads: intra-op --threads, inter-op 1 (tf.config.threading
and TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS, which oneDNN's pool follows);
TF_ENABLE_ONEDNN_OPTS=1 unless set otherwise.

Prints one JSON line: loop_seconds (the training loop only: the steps, batching included, not
the tracing nor the evaluation), images_per_sec (of the loop), eval_seconds, wall_seconds (since
this program's first line, TensorFlow's import included; the shell script also times the whole
process), precision_at_1 (moving-average weights), and the run's shape.
"""
import argparse
import math
import os
import time

WALL_START = time.perf_counter()

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=float, default=2.5)
    p.add_argument("--batch_size", type=int, default=128, help="global batch")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup_steps", type=int, default=50)
    p.add_argument("--ema_decay", type=float, default=0.9999)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data_dir", default=DEFAULT_DIR)
    return p.parse_args()


ARGS = parse_args()
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_NUM_INTRAOP_THREADS"] = str(ARGS.threads)
os.environ["TF_NUM_INTEROP_THREADS"] = "1"

import gzip  # noqa: E402
import json  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402


def load(data_dir, prefix):
    """One split of the IDX files: images (N, 28, 28, 1) float32 in [0, 1], labels (N,) int32."""
    with gzip.open(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)
    with gzip.open(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images.astype(np.float32) / 255.0, labels.astype(np.int32)


def lenet(num_classes=10):
    layers = keras.layers
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(32, 5, padding="same", activation="relu", kernel_initializer="he_normal",
                      name="conv1"),
        layers.MaxPooling2D(2, padding="valid", name="pool1"),
        layers.Conv2D(64, 3, padding="same", activation="relu", kernel_initializer="he_normal",
                      name="conv2"),
        layers.MaxPooling2D(2, padding="valid", name="pool2"),
        layers.Flatten(),
        layers.Dense(256, activation="relu", kernel_initializer="he_normal", name="fc1"),
        layers.Dense(num_classes, kernel_initializer="glorot_uniform", name="logits"),
    ], name="lenet")


def main(a):
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(a.seed)
    rng = np.random.default_rng(a.seed)

    x, y = load(a.data_dir, "train")
    tx, ty = load(a.data_dir, "t10k")
    batch = a.batch_size
    per_epoch = len(x) // batch  # drop_remainder, as tower's input pipeline
    total = math.ceil(a.epochs * per_epoch)
    if total < 1:
        raise SystemExit("--epochs %g is no step of %d" % (a.epochs, per_epoch))
    warmup = a.warmup_steps if a.warmup_steps < total else total // 2  # tower's clamp

    model = lenet()
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0, decay_steps=total - warmup, alpha=0.0,
        warmup_target=a.lr, warmup_steps=warmup)
    opt = keras.optimizers.Adam(learning_rate=schedule, beta_1=0.9, beta_2=0.999, epsilon=1e-8)
    weights = model.trainable_variables
    opt.build(weights)
    shadows = [tf.Variable(tf.convert_to_tensor(v), trainable=False) for v in weights]

    @tf.function(input_signature=[tf.TensorSpec((batch, 28, 28, 1), tf.float32),
                                  tf.TensorSpec((batch,), tf.int32)])
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        grads = tape.gradient(loss, weights)
        opt.apply_gradients(zip(grads, weights))
        n = tf.cast(opt.iterations, tf.float32)  # after the update: the steps done
        one_minus_decay = 1.0 - tf.minimum(a.ema_decay, (1.0 + n) / (10.0 + n))
        for s, v in zip(shadows, weights):
            s.assign_sub((s - tf.convert_to_tensor(v)) * one_minus_decay)
        return loss

    @tf.function(input_signature=[tf.TensorSpec((None, 28, 28, 1), tf.float32)])
    def predict(images):
        return tf.argmax(model(images, training=False), axis=1, output_type=tf.int32)

    t0 = time.perf_counter()
    train_step.get_concrete_function()
    trace_seconds = time.perf_counter() - t0

    loss = None
    step = 0
    loop_start = time.perf_counter()
    while step < total:
        order = rng.permutation(len(x))
        for b in range(per_epoch):
            if step == total:
                break
            idx = order[b * batch:(b + 1) * batch]
            loss = train_step(x[idx], y[idx])
            step += 1
    final_loss = float(loss)  # waits for the last step
    loop_seconds = time.perf_counter() - loop_start

    t0 = time.perf_counter()
    for v, s in zip(weights, shadows):  # evaluate with the moving averages
        v.assign(s)
    correct = sum(int(np.sum(predict(tx[i:i + 1000]).numpy() == ty[i:i + 1000]))
                  for i in range(0, len(tx), 1000))
    eval_seconds = time.perf_counter() - t0

    print(json.dumps({
        "peer": "tensorflow %s, keras %s" % (tf.__version__, keras.__version__),
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS"), "threads": a.threads,
        "global_batch": batch, "steps": total, "steps_per_epoch": per_epoch,
        "warmup_steps": warmup, "epochs": a.epochs, "trace_seconds": trace_seconds,
        "loop_seconds": loop_seconds, "images_per_sec": total * batch / loop_seconds,
        "final_loss": final_loss, "eval_seconds": eval_seconds,
        "precision_at_1": correct / len(tx), "wall_seconds": time.perf_counter() - WALL_START}),
        flush=True)


if __name__ == "__main__":
    main(ARGS)
