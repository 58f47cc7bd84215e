#!/usr/bin/env python3
"""Synchronous parameter-server training of an MLP on scikit-learn's digits.

Plain TensorFlow 1.x-style between-graph replication (tf.compat.v1 on TF 2.x):
tf.train.Server, replica_device_setter, SyncReplicasOptimizer and
MonitoredTrainingSession. Nothing here knows about any proxy or sidecar: every
task simply dials its peers at the addresses its own cluster spec gives them.

    train.py --job ps     --task 0 --ps 127.0.0.1:2222 --workers 127.0.0.1:2223,127.0.0.1:2224
    train.py --job worker --task 0 --ps 127.0.0.1:2222 --workers 127.0.0.1:2223,127.0.0.1:2224
    train.py --job worker --task 1 --ps 127.0.0.1:2222 --workers 127.0.0.1:2223,127.0.0.1:2224

Each task may be given a different spec: TF binds the port of this task's own
entry and dials every other entry as written, so a peer can be pointed at a
local proxy port. Worker 0 is the chief.
"""

import argparse
import json
import os
import sys
import time

PROCESS_START = time.time()

# Fixed, seed-independent train/test split, so accuracies from runs with
# different --seed values are measured on the same held-out digits.
SPLIT_SEED = 0
TEST_FRACTION = 0.2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", choices=["ps", "worker"], required=True)
    p.add_argument("--task", type=int, required=True, help="index within --job")
    p.add_argument("--ps", required=True, help="HOST:PORT[,HOST:PORT...] as this task sees them")
    p.add_argument("--workers", required=True, help="HOST:PORT,HOST:PORT... as this task sees them")
    p.add_argument("--steps", type=int, default=200, help="global steps (default 200)")
    p.add_argument("--batch", type=int, default=64, help="per-worker batch size (default 64)")
    p.add_argument("--lr", type=float, default=0.1, help="learning rate (default 0.1)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum, 0 for plain SGD (default 0.9)")
    p.add_argument("--hidden", type=int, default=1024,
                   help="width of the first hidden layer; the second is half (default 1024: 596,490 params)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--result", help="write this task's result as JSON to FILE")
    p.add_argument("--grpc-compression", choices=["none", "gzip"], default="none",
                   help="TF's own gRPC message compression (default none)")
    p.add_argument("--threads", type=int, default=0,
                   help="intra/inter-op thread pool size, 0 = TF default (all cores)")
    p.add_argument("--grace-secs", type=float, default=1.0,
                   help="how long the chief waits for its queue-runner thread at close (TF default 120)")
    p.add_argument("--linger-secs", type=float, default=0.5,
                   help="how long a ps stays up after the last worker is done (default 0.5)")
    args = p.parse_args(argv)
    args.ps_hosts = [h for h in args.ps.split(",") if h]
    args.worker_hosts = [h for h in args.workers.split(",") if h]
    if not args.ps_hosts or not args.worker_hosts:
        p.error("--ps and --workers need at least one HOST:PORT each")
    n = len(args.ps_hosts if args.job == "ps" else args.worker_hosts)
    if not 0 <= args.task < n:
        p.error(f"--task {args.task} out of range for {n} {args.job} task(s)")
    return args


def log(args, msg):
    print(f"[{args.job}{args.task} {time.time() - PROCESS_START:7.2f}s] {msg}", flush=True)


def write_result(args, result):
    log(args, "result " + json.dumps(result, sort_keys=True))
    if args.result:
        tmp = args.result + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, args.result)  # a reader never sees half a file


def session_config(tf, args):
    config = tf.compat.v1.ConfigProto()
    if args.job == "worker":
        # Without filters the chief's master would list (and wait for) every
        # task's devices; worker i only needs the ps tasks and itself, so a
        # slow or absent peer worker never blocks its session.
        config.device_filters.extend(["/job:ps", f"/job:worker/task:{args.task}"])
    else:
        # The ps only ever runs its own shutdown queue.
        config.device_filters.append(f"/job:ps/task:{args.task}")
    if args.grpc_compression == "gzip":
        # TF's own gRPC message compression (gzip/deflate inside gRPC), not
        # anything of the sidecar's; it is applied to the channels this task
        # opens, so it is set on the server config as well as the session.
        config.rpc_options.compression_algorithm = "gzip"
        config.rpc_options.compression_level = 2
    if args.threads:
        config.intra_op_parallelism_threads = args.threads
        config.inter_op_parallelism_threads = args.threads
    return config


def done_queue(tf, ps_task, num_workers):
    """One queue per ps task, on that task: each worker puts a token in every
    one when it has finished, and a ps exits after num_workers tokens. This
    replaces server.join(), which never returns."""
    with tf.compat.v1.device(f"/job:ps/task:{ps_task}"):
        return tf.compat.v1.FIFOQueue(
            num_workers, tf.int32, shapes=[], shared_name=f"done_queue_ps{ps_task}", name=f"done_queue_ps{ps_task}")


def barrier(tf, name, num_workers, task, senders):
    """Ops for a rendezvous through queues on ps 0 (queues need no
    initialisation, so this also works before the chief has initialised the
    variables). Each task in `senders` puts a token in the queue of every other
    worker; each worker then takes one token from every sender but itself.
    Returns (signal_op, wait_op); either may be None."""
    queues = []
    with tf.compat.v1.device("/job:ps/task:0"):
        for i in range(num_workers):
            queues.append(tf.compat.v1.FIFOQueue(
                num_workers, tf.int32, shapes=[], shared_name=f"{name}_w{i}", name=f"{name}_w{i}"))
    signal = None
    if task in senders:
        signal = tf.group(*[q.enqueue(task) for i, q in enumerate(queues) if i != task])
    expected = len([s for s in senders if s != task])
    wait = queues[task].dequeue_many(expected) if expected else None
    return signal, wait


def load_data(args, num_workers):
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)  # pixel values are 0..16
    y = y.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y)
    if args.job == "worker":
        # Disjoint shards, one per worker, as data-parallel training would have.
        x_train = x_train[args.task::num_workers]
        y_train = y_train[args.task::num_workers]
    return x_train, y_train, x_test, y_test


def batches(x, y, batch, seed):
    """Endless shuffled epochs over this worker's shard."""
    import numpy as np

    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(x))
        for start in range(0, len(order) - batch + 1, batch):
            idx = order[start:start + batch]
            yield x[idx], y[idx]


def run_ps(tf, args, cluster, config):
    num_workers = len(args.worker_hosts)
    server = tf.compat.v1.train.Server(cluster, job_name="ps", task_index=args.task, config=config)
    log(args, f"serving on {args.ps_hosts[args.task]}")
    started = time.time()
    with tf.Graph().as_default():
        # Only its own queue: the ps session sees no other device (filters),
        # and TF places every op in the graph, not just those that run.
        dequeue = done_queue(tf, args.task, num_workers).dequeue_many(num_workers)
        with tf.compat.v1.Session(server.target, config=config) as sess:
            sess.run(dequeue)
    log(args, f"all {num_workers} workers done")
    # A worker may still be tearing down its last call when its token
    # arrives; exiting at once would reset its connection.
    time.sleep(args.linger_secs)
    write_result(args, {"job": "ps", "task": args.task, "seconds": round(time.time() - started, 3)})


def build_model(tf, args):
    tf.compat.v1.set_random_seed(args.seed)
    sizes = [64, args.hidden, args.hidden // 2, 10]
    x = tf.compat.v1.placeholder(tf.float32, [None, sizes[0]], name="x")
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
    h = x
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        w = tf.compat.v1.get_variable(
            f"w{i}", [fan_in, fan_out], tf.float32,
            tf.compat.v1.glorot_uniform_initializer(seed=args.seed + i))
        b = tf.compat.v1.get_variable(f"b{i}", [fan_out], tf.float32, tf.compat.v1.zeros_initializer())
        h = tf.matmul(h, w) + b
        if i < len(sizes) - 2:
            h = tf.nn.relu(h)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(h, 1), y), tf.float32))
    return x, y, loss, accuracy


def quiet_cancelled_queue_runner(tf):
    """At close the chief's SyncReplicas queue-runner thread is still waiting
    for the gradients of a step after the last; closing the session cancels
    it, and the thread reports that as an uncaught exception. That is the
    expected end of training, not an error, so don't print a traceback."""
    import threading

    default_hook = threading.excepthook

    def hook(a):
        if (a.thread is not None and a.thread.name.startswith("QueueRunnerThread-sync_token_q")
                and isinstance(a.exc_value, tf.errors.CancelledError)):
            return
        default_hook(a)

    threading.excepthook = hook


class LeastLoadedPs:
    """Places each variable on the ps task holding the fewest bytes so far.
    The default round-robin would put every weight matrix on one ps and every
    bias on the other when there are two. (TF 1's GreedyLoadBalancingStrategy,
    which did this, is no longer exported.)"""

    def __init__(self, tf, num_ps):
        self.tf = tf
        self.loads = [0] * num_ps

    def __call__(self, op):
        task = self.loads.index(min(self.loads))
        try:
            shape = self.tf.TensorShape(op.get_attr("shape"))
            size = shape.num_elements() * self.tf.as_dtype(op.get_attr("dtype")).size
        except (ValueError, TypeError):
            size = 0  # no static shape: place it, but don't count it
        self.loads[task] += size
        return task


def run_worker(tf, args, cluster, config):
    num_workers = len(args.worker_hosts)
    num_ps = len(args.ps_hosts)
    is_chief = args.task == 0
    server = tf.compat.v1.train.Server(cluster, job_name="worker", task_index=args.task, config=config)
    log(args, f"serving on {args.worker_hosts[args.task]}")
    x_train, y_train, x_test, y_test = load_data(args, num_workers)

    worker_device = f"/job:worker/task:{args.task}"
    strategy = LeastLoadedPs(tf, num_ps)
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            ps_tasks=num_ps, worker_device=worker_device, ps_strategy=strategy)):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        x, y, loss, accuracy = build_model(tf, args)
        if args.momentum:
            base = tf.compat.v1.train.MomentumOptimizer(args.lr, args.momentum)
        else:
            base = tf.compat.v1.train.GradientDescentOptimizer(args.lr)
        # Every global step averages exactly one gradient from each worker
        # (as long as both keep up; the optimizer counts gradients, not
        # workers, which is why the launcher checks local_steps per worker).
        opt = tf.compat.v1.train.SyncReplicasOptimizer(
            base, replicas_to_aggregate=num_workers, total_num_replicas=num_workers)
        train_op = opt.minimize(loss, global_step=global_step)
        # No initial tokens: with the default (one per worker) each worker's
        # first step returns at once, before global step 0 has been applied,
        # and its second gradient is dropped as stale, i.e. wasted.
        sync_hook = opt.make_session_run_hook(is_chief, num_tokens=0)
        # Extra tokens for the end of training, see below.
        release_tokens = opt.get_init_tokens_op(num_workers)
    params = sum(int(v.shape.num_elements()) for v in tf.compat.v1.trainable_variables())

    # Rendezvous 1: the chief tells the others that the variables exist.
    # MonitoredTrainingSession makes a non-chief poll for that only every
    # recovery_wait_secs (30 s, not configurable there), so a non-chief that
    # asks a moment too early sleeps 30 s while the chief trains alone.
    init_signal, init_wait = barrier(tf, "chief_ready", num_workers, args.task, senders=[0])
    # Rendezvous 2: everyone has a session. Otherwise whoever is first takes
    # every sync token and runs global steps on its own gradients only.
    start_signal, start_wait = barrier(tf, "start", num_workers, args.task, senders=range(num_workers))
    done_ops = [done_queue(tf, j, num_workers).enqueue(args.task) for j in range(num_ps)]

    def raw(op):
        # Runs `op` on the session underneath, without the hooks firing.
        return lambda step_context: step_context.session.run(op)

    if not is_chief:
        log(args, "waiting for the chief to initialise the model")
        with tf.compat.v1.Session(server.target, config=config) as sess:
            sess.run(init_wait)

    if is_chief:
        quiet_cancelled_queue_runner(tf)
    hooks = [sync_hook, tf.compat.v1.train.StopAtStepHook(last_step=args.steps)]
    local_steps = 0
    data = batches(x_train, y_train, args.batch, seed=args.seed * 1000 + args.task)
    with tf.compat.v1.train.MonitoredTrainingSession(
            master=server.target, is_chief=is_chief, hooks=hooks, config=config,
            # At the end the chief's queue-runner thread is left waiting for
            # gradients of a step that never comes; TF would give it 120 s.
            stop_grace_period_secs=args.grace_secs) as sess:
        if is_chief and init_signal is not None:
            sess.run_step_fn(raw(init_signal))
        if start_signal is not None:
            sess.run_step_fn(raw(start_signal))
        if start_wait is not None:
            sess.run_step_fn(raw(start_wait))
        log(args, "training")
        started = time.time()
        while not sess.should_stop():
            xb, yb = next(data)
            sess.run(train_op, feed_dict={x: xb, y: yb})
            local_steps += 1
        seconds = time.time() - started
        # A worker that read the global step just before the last update may
        # have started one more step and now waits for a sync token that will
        # never be handed out (the other worker has stopped). Spare tokens let
        # it return, see that training is over and stop.
        sess.run_step_fn(raw(release_tokens))
        step = sess.run_step_fn(raw(global_step))
        result = {
            "job": "worker", "task": args.task, "chief": is_chief,
            "local_steps": local_steps, "global_step": int(step), "target_steps": args.steps,
            "seconds": round(seconds, 3),
            "step_seconds": round(seconds / local_steps, 5) if local_steps else None,
            "startup_seconds": round(started - PROCESS_START, 3),
            "params": params, "batch": args.batch, "lr": args.lr, "momentum": args.momentum,
            "hidden": args.hidden, "grpc_compression": args.grpc_compression,
        }
        if is_chief:
            test_loss, test_acc = sess.run_step_fn(
                lambda step_context: step_context.session.run(
                    [loss, accuracy], feed_dict={x: x_test, y: y_test}))
            result["test_loss"] = round(float(test_loss), 5)
            result["test_accuracy"] = round(float(test_acc), 5)
        log(args, f"stopped after {local_steps} local steps, global step {step}, closing")

    # Only now let the ps tasks go: the chief's evaluation and session close
    # above still need them. This session is deliberately left open: closing
    # it sends DeleteWorkerSession to a ps that may already be exiting, and
    # the process exits right after anyway.
    done_sess = tf.compat.v1.Session(server.target, config=config)
    done_sess.run(done_ops)
    write_result(args, result)


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # keep TF's INFO chatter out of the logs
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()  # graph mode, sessions, ref variables
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.WARN)
    log(args, f"tensorflow {tf.__version__} imported")
    cluster = tf.train.ClusterSpec({"ps": args.ps_hosts, "worker": args.worker_hosts})
    config = session_config(tf, args)
    if args.job == "ps":
        run_ps(tf, args, cluster, config)
    else:
        run_worker(tf, args, cluster, config)
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's gRPC server has no shutdown call and its threads can keep a normal
    # interpreter exit waiting; everything worth keeping is written by now.
    os._exit(0)


if __name__ == "__main__":
    main()
