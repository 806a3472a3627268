"""The cifar10 tutorial CNN in TensorFlow 2.x, written as the classic multi-tower program of
TensorFlow's cifar10_multi_gpu_train.py (tf.compat.v1 graph mode), timed like `tower bench`:
prints one JSON line (images_per_sec = median of timed windows after warm-up).

usage: cifar10_tensorflow.py --threads T --towers N --mode train|infer --precision fp32|bf16
                             [--bf16 grappler|keras] [--batch_size 128]

The program, as in the tutorial:
  - the model of src/tower/models/cifar10_cnn.cc (NHWC, 24x24x3): conv 5x5x64 + relu, max-pool 3x3/2
    SAME, LRN(4, bias 1, alpha 0.001/9, beta 0.75), conv 5x5x64 + relu, LRN, max-pool, fc 384,
    fc 192 (weight decay 0.004 on both), linear 10; sparse softmax cross-entropy; the tutorial's
    truncated-normal stddevs and bias constants;
  - variables on /cpu:0 made with tf.get_variable and shared by the towers through variable_scope
    reuse; tower i builds its loss under tf.name_scope('tower_i') on its own device (tower_loss:
    cross-entropy plus that tower's weight-decay terms); the towers' gradients are averaged
    (average_gradients) and applied by one GradientDescentOptimizer (learning rate 0.01, as
    `tower bench`), then an ExponentialMovingAverage(0.9999) of the trainable variables is updated
    after the step (under a control dependency on it);
  - towers: --placement devices (default) gives tower i the logical CPU device /cpu:i, made with
    the session's ConfigProto device_count {'CPU': N} (TF1's way of making logical CPU devices);
    --placement cpu0 puts every tower on /cpu:0. Either way all CPU devices share the process's
    intra-op thread pool of --threads threads; inter-op parallelism is the number of towers (so
    the towers' kernels can run at the same time) unless --inter_op says otherwise. Both are set
    in the session config and in TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS (without them
    the oneDNN kernels run on a pool of one thread per core whatever the session says);
    busy_threads in the JSON line counts the threads that worked during the timed steps;
  - infer: each tower computes the logits of its share of the batch (no gradients, no update);
    the logits are fetched (a few KB copied per step).

Synthetic data: random images and labels are non-trainable variables resident in memory, one
shard per tower on the tower's device, initialized once: there is no input pipeline cost (as
`tower bench` and the PyTorch peer).

bf16 (--precision bf16), two ways:
  --bf16 grappler: the fp32 graph, rewritten by grappler's auto_mixed_precision_onednn_bfloat16
    (RewriterConfig, in the session config). TensorFlow applies it only where oneDNN supports
    bf16 on this CPU (it says so in a log line otherwise).
  --bf16 keras: Keras's mixed_bfloat16 policy written by hand: fp32 variables, every layer computes
    in bf16 (inputs and weights cast to bf16), the logits cast back to fp32 for the loss. (Keras 3
    layers cannot be built in a tf.compat.v1 graph, so the policy's casts are spelled out; LRN,
    which has no bf16 CPU kernel, runs in fp32 like a layer given a float32 policy.)
The JSON line says which was used, how many nodes of the graph as run carry bf16 (bf16_nodes,
counted in the partition graphs of one extra step after timing; --show_ops lists them) and
whether those run as oneDNN kernels (bf16_kernels "onednn") or TensorFlow's Eigen fallback
("eigen": oneDNN's bf16 needs AVX-512 and TensorFlow then logs "oneDNN supports DT_BFLOAT16 only
on platforms with AVX-512"; the Eigen kernels convert to fp32 and are many times slower).

gflops uses the FLOP count of `tower bench` (2 x multiply-adds of the convolutions and matmuls:
forward for infer, 3 x forward for train, i.e. including conv1's image gradient that TensorFlow
does not compute), so GFLOP/s ratios are images/s ratios.
"""
import argparse
import collections
import json
import os
import resource
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--towers", type=int, default=1)
    p.add_argument("--placement", choices=["devices", "cpu0"], default="devices")
    p.add_argument("--inter_op", type=int, default=0, help="inter-op threads (default: towers)")
    p.add_argument("--mode", choices=["train", "infer"], default="train")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--bf16", choices=["grappler", "keras"], default="grappler")
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--budget_s", type=float, default=0,
                   help="cut --steps so that the timed windows take about this many seconds")
    p.add_argument("--show_ops", action="store_true",
                   help="print on stderr the op types of the graph as run (bf16 ones marked)")
    return p.parse_args()


ARGS = parse_args()
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The session's intra-op pool is not the only one: the oneDNN kernels also ran on a process-wide
# pool of one thread per core (busy_threads 2 at --threads 1 on 2 cores) unless these say otherwise.
os.environ["TF_NUM_INTRAOP_THREADS"] = str(ARGS.threads)
os.environ["TF_NUM_INTEROP_THREADS"] = str(ARGS.inter_op or ARGS.towers)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.core.protobuf import rewriter_config_pb2  # noqa: E402

tf1 = tf.compat.v1

NUM_CLASSES = 10
LEARNING_RATE = 0.01
MOVING_AVERAGE_DECAY = 0.9999


def thread_cpu_seconds():
    """CPU seconds of each thread of this process (Linux /proc), by thread id."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[tid] = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        except OSError:
            pass
    return out


def forward_mflop_per_image():
    conv1 = 24 * 24 * 64 * (5 * 5 * 3)
    conv2 = 12 * 12 * 64 * (5 * 5 * 64)
    fc = 6 * 6 * 64 * 384 + 384 * 192 + 192 * NUM_CLASSES
    return 2.0 * (conv1 + conv2 + fc) / 1e6


def _variable_on_cpu(name, shape, initializer):
    with tf.device("/cpu:0"):
        return tf1.get_variable(name, shape, initializer=initializer, dtype=tf.float32)


def _variable_with_weight_decay(name, shape, stddev, wd):
    var = _variable_on_cpu(name, shape, tf1.truncated_normal_initializer(stddev=stddev, seed=1))
    if wd is not None:
        weight_decay = tf.multiply(tf.nn.l2_loss(var), wd, name="weight_loss")
        tf1.add_to_collection("losses", weight_decay)
    return var


def inference(images, dtype):
    """The tutorial's cifar10.inference(); dtype is the compute dtype (bf16 for --bf16 keras)."""
    c = (lambda v: tf.cast(v, dtype)) if dtype != tf.float32 else (lambda v: v)
    x = c(images)

    def lrn(v, name):  # no bf16 LRN kernel on CPU: fp32, as a Keras layer with a float32 policy
        y = tf.nn.lrn(tf.cast(v, tf.float32), 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75, name=name)
        return c(y)

    with tf1.variable_scope("conv1") as scope:
        kernel = _variable_with_weight_decay("weights", [5, 5, 3, 64], 5e-2, None)
        biases = _variable_on_cpu("biases", [64], tf1.constant_initializer(0.0))
        conv = tf.nn.conv2d(x, c(kernel), [1, 1, 1, 1], padding="SAME")
        conv1 = tf.nn.relu(tf.nn.bias_add(conv, c(biases)), name=scope.name)
    pool1 = tf.nn.max_pool2d(conv1, ksize=3, strides=2, padding="SAME", name="pool1")
    norm1 = lrn(pool1, "norm1")
    with tf1.variable_scope("conv2") as scope:
        kernel = _variable_with_weight_decay("weights", [5, 5, 64, 64], 5e-2, None)
        biases = _variable_on_cpu("biases", [64], tf1.constant_initializer(0.1))
        conv = tf.nn.conv2d(norm1, c(kernel), [1, 1, 1, 1], padding="SAME")
        conv2 = tf.nn.relu(tf.nn.bias_add(conv, c(biases)), name=scope.name)
    norm2 = lrn(conv2, "norm2")
    pool2 = tf.nn.max_pool2d(norm2, ksize=3, strides=2, padding="SAME", name="pool2")
    with tf1.variable_scope("local3") as scope:
        reshape = tf.reshape(pool2, [images.shape[0], -1])
        dim = reshape.shape[1]
        weights = _variable_with_weight_decay("weights", [dim, 384], 0.04, 0.004)
        biases = _variable_on_cpu("biases", [384], tf1.constant_initializer(0.1))
        local3 = tf.nn.relu(tf.matmul(reshape, c(weights)) + c(biases), name=scope.name)
    with tf1.variable_scope("local4") as scope:
        weights = _variable_with_weight_decay("weights", [384, 192], 0.04, 0.004)
        biases = _variable_on_cpu("biases", [192], tf1.constant_initializer(0.1))
        local4 = tf.nn.relu(tf.matmul(local3, c(weights)) + c(biases), name=scope.name)
    with tf1.variable_scope("softmax_linear") as scope:
        weights = _variable_with_weight_decay("weights", [192, NUM_CLASSES], 1 / 192.0, None)
        biases = _variable_on_cpu("biases", [NUM_CLASSES], tf1.constant_initializer(0.0))
        logits = tf.add(tf.matmul(local4, c(weights)), c(biases), name=scope.name)
    return tf.cast(logits, tf.float32)


def loss(logits, labels):
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits,
                                                                   name="cross_entropy_per_example")
    tf1.add_to_collection("losses", tf.reduce_mean(cross_entropy, name="cross_entropy"))
    return tf.add_n(tf1.get_collection("losses"), name="total_loss")


def tower_loss(scope, images, labels, dtype):
    """Total loss of one tower: its cross-entropy plus the weight-decay terms made in its scope."""
    loss(inference(images, dtype), labels)
    losses = tf1.get_collection("losses", scope)
    return tf.add_n(losses, name="total_loss")


def average_gradients(tower_grads):
    """The mean over towers of each variable's gradient ((grad, var) lists, one per tower)."""
    average_grads = []
    for grad_and_vars in zip(*tower_grads):
        grads = [tf.expand_dims(g, 0) for g, _ in grad_and_vars]
        grad = tf.reduce_mean(tf.concat(axis=0, values=grads), 0)
        average_grads.append((grad, grad_and_vars[0][1]))
    return average_grads


def tower_data(i, shard, device):
    """Tower i's synthetic batch: non-trainable variables on its device (no input pipeline)."""
    rng = np.random.default_rng(i)
    with tf.device(device):
        images = tf1.Variable(rng.standard_normal((shard, 24, 24, 3), dtype=np.float32),
                              trainable=False, collections=[tf1.GraphKeys.LOCAL_VARIABLES],
                              name="images_%d" % i)
        labels = tf1.Variable((np.arange(shard) % NUM_CLASSES).astype(np.int32), trainable=False,
                              collections=[tf1.GraphKeys.LOCAL_VARIABLES], name="labels_%d" % i)
    return images.read_value(), labels.read_value()


def build(a):
    dtype = tf.bfloat16 if a.precision == "bf16" and a.bf16 == "keras" else tf.float32
    shard = a.batch_size // a.towers
    device = (lambda i: "/cpu:%d" % i) if a.placement == "devices" else (lambda i: "/cpu:0")
    with tf.device("/cpu:0"):
        global_step = tf1.train.get_or_create_global_step()
        opt = tf1.train.GradientDescentOptimizer(LEARNING_RATE)
    tower_grads, outputs = [], []
    with tf1.variable_scope(tf1.get_variable_scope()):
        for i in range(a.towers):
            images, labels = tower_data(i, shard, device(i))
            with tf.device(device(i)):
                with tf.name_scope("tower_%d" % i) as scope:
                    if a.mode == "train":
                        tower_l = tower_loss(scope, images, labels, dtype)
                        tf1.get_variable_scope().reuse_variables()
                        tower_grads.append(opt.compute_gradients(tower_l))
                    else:
                        outputs.append(inference(images, dtype))
                        tf1.get_variable_scope().reuse_variables()
    if a.mode != "train":  # fetched (tf.group of the logits would let grappler prune them all)
        return outputs
    with tf.device("/cpu:0"):
        grads = average_gradients(tower_grads) if a.towers > 1 else tower_grads[0]
        apply_gradient_op = opt.apply_gradients(grads, global_step=global_step)
        with tf.control_dependencies([apply_gradient_op]):
            ema = tf1.train.ExponentialMovingAverage(MOVING_AVERAGE_DECAY, global_step)
            variables_averages_op = ema.apply(tf1.trainable_variables())
        return tf.group(apply_gradient_op, variables_averages_op)


def session_config(a):
    config = tf1.ConfigProto(intra_op_parallelism_threads=a.threads,
                             inter_op_parallelism_threads=a.inter_op or a.towers,
                             device_count={"CPU": a.towers if a.placement == "devices" else 1},
                             allow_soft_placement=False)
    if a.precision == "bf16" and a.bf16 == "grappler":
        config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 = (
            rewriter_config_pb2.RewriterConfig.ON)
    return config


def main(a):
    if a.batch_size % a.towers:
        sys.exit("--batch_size %d must be a multiple of --towers %d" % (a.batch_size, a.towers))
    tf1.disable_eager_execution()
    tf1.set_random_seed(1)
    with tf.Graph().as_default():
        step_op = build(a)
        init = tf.group(tf1.global_variables_initializer(), tf1.local_variables_initializer())
        with tf1.Session(config=session_config(a)) as sess:
            cpus = [d.name for d in sess.list_devices() if d.device_type == "CPU"]
            sess.run(init)
            for _ in range(a.warmup):
                sess.run(step_op)
            if a.budget_s:  # fewer steps per window where a step is slow (bf16 without oneDNN)
                t0 = time.perf_counter()
                sess.run(step_op)
                step_s = time.perf_counter() - t0
                a.steps = max(1, min(a.steps, int(a.budget_s / (a.windows * step_s))))
            windows = []
            r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            th0 = thread_cpu_seconds()
            for _ in range(a.windows):
                t0 = time.perf_counter()
                for _ in range(a.steps):
                    sess.run(step_op)
                windows.append((time.perf_counter() - t0) / a.steps)
            r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            cpu_per_wall = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / (w1 - w0)
            th1 = thread_cpu_seconds()
            # Threads that worked at least 10% of the timed wall time (a check of --threads).
            busy_threads = sum(1 for t, c in th1.items() if c - th0.get(t, 0.0) > 0.1 * (w1 - w0))
            # One more step that returns the graphs as run (after grappler), to count bf16 nodes.
            meta = tf1.RunMetadata()
            sess.run(step_op, options=tf1.RunOptions(output_partition_graphs=True), run_metadata=meta)
    bf16 = tf.bfloat16.as_datatype_enum
    ops = collections.Counter()
    for g in meta.partition_graphs:
        for n in g.node:
            is_bf16 = any(v.type == bf16 or bf16 in v.list.type for v in n.attr.values())
            ops[(n.op, is_bf16)] += 1
    bf16_nodes = sum(count for (op, is_bf16), count in ops.items() if is_bf16)
    bf16_kernels = None
    if bf16_nodes:
        onednn = any(op.startswith("_Mkl") for (op, is_bf16) in ops if is_bf16)
        bf16_kernels = "onednn" if onednn else "eigen"
    if a.show_ops:
        for (op, is_bf16), count in sorted(ops.items()):
            op += " [bf16]" if is_bf16 else ""
            print("%4d %s" % (count, op), file=sys.stderr)
    sec = statistics.median(windows)
    mflop = forward_mflop_per_image() * (3 if a.mode == "train" else 1)
    print(json.dumps({"peer": "tensorflow " + tf.__version__, "mode": a.mode, "threads": a.threads,
                      "towers": a.towers, "cpu_devices": len(cpus), "placement": a.placement,
                      "precision": a.precision,
                      "bf16": a.bf16 if a.precision == "bf16" else None, "bf16_nodes": bf16_nodes,
                      "bf16_kernels": bf16_kernels,
                      "batch_size": a.batch_size, "steps": a.steps, "windows": a.windows,
                      "images_per_sec": a.batch_size / sec,
                      "ms_per_step": sec * 1e3, "mflop_per_image": mflop,
                      "gflops": mflop * a.batch_size / sec / 1e3,
                      "cpu_per_wall": cpu_per_wall, "busy_threads": busy_threads,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main(ARGS)
