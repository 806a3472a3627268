"""ResNet-20 for CIFAR (He et al. 2016, section 4.2, projection shortcuts) in TensorFlow 2.x Keras,
the twin of `tower bench --model resnet20` (src/tower/models/resnet20.cc), timed like it: prints
one JSON line (images_per_sec = the median of timed windows after warm-up).

usage: resnet20_tensorflow.py --threads T --mode train|infer [--precision fp32|bf16]
                              [--batch_size 128] [--warmup 3] [--steps 10] [--windows 5]

The network: conv 3x3x16 + batch norm + relu; three stages of three basic blocks (16, 32, 64
channels, stride 2 at the start of stages 2 and 3; each block conv-bn-relu, conv-bn, plus the
input or, where the shape changes, a 1x1 conv + bn projection, then relu); global average pooling;
dense 10. Convolutions without bias, He-normal; batch norm with Keras' defaults (momentum 0.99,
epsilon 1e-3, as tower's); L2 weight decay 1e-4 on the convolution and dense weights (tower's
1e-4 * sum(w^2) / 2). NHWC, 32x32x3, synthetic images and labels resident in memory.
train: one tf.function step (forward, cross-entropy plus decay, gradients, SGD with momentum 0.9
and learning rate 0.01: `tower bench --optimizer momentum`); infer: the logits in eval mode.
bf16: Keras' mixed_bfloat16 policy (the last dense layer and the loss in float32).
Threads: --threads intra-op threads, 1 inter-op thread (also in TF_NUM_INTRAOP_THREADS, which
oneDNN's kernels read)."""
import argparse
import json
import os
import resource
import statistics
import sys
import time

args = argparse.ArgumentParser()
args.add_argument("--threads", type=int, default=2)
args.add_argument("--mode", choices=["train", "infer"], default="train")
args.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
args.add_argument("--batch_size", type=int, default=128)
args.add_argument("--warmup", type=int, default=3)
args.add_argument("--steps", type=int, default=10)
args.add_argument("--windows", type=int, default=5)
a = args.parse_args()
os.environ["TF_NUM_INTRAOP_THREADS"] = str(a.threads)
os.environ["TF_NUM_INTEROP_THREADS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402 (after the thread variables)

tf.config.threading.set_intra_op_parallelism_threads(a.threads)
tf.config.threading.set_inter_op_parallelism_threads(1)
if a.precision == "bf16":
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
layers = tf.keras.layers
decay = tf.keras.regularizers.l2(0.5e-4)


def conv_bn(x, filters, kernel, stride, relu):
    x = layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False,
                      kernel_initializer="he_normal", kernel_regularizer=decay)(x)
    x = layers.BatchNormalization(momentum=0.99, epsilon=1e-3)(x)
    return layers.ReLU()(x) if relu else x


def block(x, filters, stride):
    h = conv_bn(x, filters, 3, stride, True)
    h = conv_bn(h, filters, 3, 1, False)
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = conv_bn(x, filters, 1, stride, False)
    return layers.ReLU()(layers.Add()([h, shortcut]))


inputs = tf.keras.Input((32, 32, 3), batch_size=a.batch_size)
x = conv_bn(inputs, 16, 3, 1, True)
for stage, filters in enumerate([16, 32, 64]):
    for i in range(3):
        x = block(x, filters, 2 if stage > 0 and i == 0 else 1)
x = layers.GlobalAveragePooling2D()(x)
logits = layers.Dense(10, kernel_regularizer=decay, dtype="float32")(x)
model = tf.keras.Model(inputs, logits)

images = tf.Variable(tf.random.uniform((a.batch_size, 32, 32, 3)), trainable=False)
labels = tf.Variable(tf.random.uniform((a.batch_size,), 0, 10, dtype=tf.int32), trainable=False)
optimizer = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
xent = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step():
    with tf.GradientTape() as tape:
        out = model(images, training=True)
        loss = xent(labels, out) + tf.add_n([tf.cast(l, tf.float32) for l in model.losses])
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def infer_step():
    return tf.reduce_sum(model(images, training=False))


step = train_step if a.mode == "train" else infer_step
for _ in range(a.warmup):
    step().numpy()
seconds = []
for _ in range(a.windows):
    start = time.perf_counter()
    for _ in range(a.steps):
        out = step()
    out.numpy()  # the last step is done
    seconds.append((time.perf_counter() - start) / a.steps)
per_step = statistics.median(seconds)
print(json.dumps({"model": "resnet20", "mode": a.mode, "precision": a.precision,
                  "threads": a.threads, "batch_size": a.batch_size,
                  "images_per_sec": a.batch_size / per_step, "ms_per_step": per_step * 1e3,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "tensorflow": tf.__version__}))
sys.stdout.flush()
