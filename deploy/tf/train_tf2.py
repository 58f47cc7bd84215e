#!/usr/bin/env python3
"""One task of a TF2 ParameterServerStrategy job (coordinator, worker or ps).

The job as Kubeflow's training operator runs it: every task reads TF_CONFIG,

    {"cluster": {"chief": ["h:p"], "worker": ["h:p", "h:p"], "ps": ["h:p"]},
     "task": {"type": "chief" | "worker" | "ps", "index": N}}

Workers and ps tasks start a `tf.distribute.Server` and serve until they are
killed (server.join(); the launcher kills them once the coordinator has exited
successfully, as the operator does). The coordinator (task type "chief")
creates the model's variables on the ps tasks under
`tf.distribute.experimental.ParameterServerStrategy` and trains with
`ClusterCoordinator.schedule` of a `tf.function` step (custom loop: per-worker
datasets from `create_per_worker_dataset`, `tf.GradientTape`,
`optimizer.apply_gradients`). Training is asynchronous, as this strategy is:
each scheduled step runs on whichever worker is free and applies its own
gradients; `--steps` counts steps over all workers. Then the coordinator reads
the variables, evaluates test accuracy itself and writes --result.

    TF_CONFIG='{...,"task":{"type":"ps","index":0}}'     train_tf2.py
    TF_CONFIG='{...,"task":{"type":"worker","index":0}}' train_tf2.py
    TF_CONFIG='{...,"task":{"type":"chief","index":0}}'  train_tf2.py --steps 300 --result r.json

Models (--model):
  mlp        64 -> 1024 -> 512 -> 10 on scikit-learn's digits (596,490 params,
             the same network, initialisation and split as train.py's).
  embedding  a 20000 x 32 table read with tf.gather (runs on the ps: only the
             gathered rows travel) -> mean per bag -> 10 classes, on train.py's
             synthetic bags of tokens; the table's gradient is IndexedSlices.

Nothing here knows about tlc: every task dials its peers at the addresses its
cluster spec gives them (and, in this strategy, at those of the coordinator's
spec, which it sends to every task it connects).

The optimizer is SGD with momentum written against TF's fused training ops
(ResourceApplyMomentum / ResourceSparseApplyMomentum, what TF's own
MomentumOptimizer used): the update runs on the ps that holds the variable,
so gradients go worker -> ps and values ps -> worker, as in train.py. (Keras 3,
the Keras of TF 2.21, does not support ParameterServerStrategy; its
optimizers would also compute updates on the worker.)
"""

import argparse
import json
import os
import sys
import time

PROCESS_START = time.time()
here = os.path.dirname(os.path.abspath(__file__))

MODEL_DEFAULTS = {
    "mlp": {"batch": 64, "lr": 0.1, "momentum": 0.9},
    "embedding": {"batch": 128, "lr": 1.0, "momentum": 0.9},
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODEL_DEFAULTS), default="mlp")
    p.add_argument("--steps", type=int, default=300, help="training steps over all workers (default 300)")
    p.add_argument("--warmup-steps", type=int, default=2,
                   help="the first N of --steps (tracing, function registration) are left out of "
                        "step_seconds (default 2)")
    p.add_argument("--batch", type=int, default=None, help="per-step batch (default: mlp 64, embedding 128)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: mlp 0.1, embedding 1.0)")
    p.add_argument("--momentum", type=float, default=None, help="SGD momentum (default 0.9)")
    p.add_argument("--hidden", type=int, default=1024, help="mlp: first hidden layer; the second is half")
    p.add_argument("--vocab", type=int, default=20000, help="embedding: rows of the table")
    p.add_argument("--embed-dim", type=int, default=32, help="embedding: columns of the table")
    p.add_argument("--seed", type=int, default=0, help="initialisation and data order")
    p.add_argument("--result", help="coordinator: write the result JSON here")
    p.add_argument("--check-pulls", action="store_true",
                   help="mlp, diagnostic: also send every variable of 64 KiB or more to the worker bitcast to "
                        "int32 (which a sidecar passes unchanged) from the same read, and report the relative "
                        "error of the float copy the model used (result: pull_errors)")
    p.add_argument("--check-final-read", metavar="DIR", default=None,
                   help="after training, compare what the coordinator reads of each variable (v.numpy()) "
                        "and what a checkpoint and a SavedModel it writes to DIR hold with a fingerprint of "
                        "the variable's bits computed on its ps (result: final_read: variables read, saved "
                        "or exported other than bit for bit; 0 when the end of training through sidecars "
                        "is the model)")
    p.add_argument("--log-every", type=int, default=100, help="coordinator: log the loss every N steps")
    args = p.parse_args(argv)
    for key, value in MODEL_DEFAULTS[args.model].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.check_pulls and args.model != "mlp":
        p.error("--check-pulls applies to --model mlp only")
    if not 0 <= args.warmup_steps < args.steps:
        p.error("--warmup-steps must be >= 0 and below --steps")
    return args


def tf_config():
    try:
        config = json.loads(os.environ["TF_CONFIG"])
        task = config["task"]
        return config["cluster"], task["type"], int(task.get("index", 0))
    except (KeyError, ValueError, TypeError) as e:
        sys.exit(f"train_tf2: TF_CONFIG missing or malformed ({e!r})")


def log(name, msg):
    print(f"[{name} {time.time() - PROCESS_START:7.2f}s] {msg}", flush=True)


def run_server(tf, resolver, name):
    """A worker or ps: serve until killed."""
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc", start=True)
    log(name, f"server started at {server.target}; serving until killed")
    server.join()


class Momentum:
    """SGD with momentum; slots colocated with their variables, updates by
    TF's fused ops on the variable's device (the ps)."""

    def __init__(self, tf, strategy, variables, lr, momentum):
        self.tf, self.lr, self.momentum = tf, lr, momentum
        self.slots = {}
        for v in variables:
            with strategy.extended.colocate_vars_with(v):
                self.slots[v.ref()] = tf.Variable(
                    tf.zeros(v.shape, v.dtype), trainable=False, name=v.name.split(":")[0] + "/momentum")

    def apply_gradients(self, grads_and_vars):
        tf = self.tf
        ops = []
        for g, v in grads_and_vars:
            accum = self.slots[v.ref()]
            if isinstance(g, tf.IndexedSlices):
                # Sum duplicate rows first (on the worker), as TF's optimizers do.
                rows, idx = tf.unique(g.indices)
                values = tf.math.unsorted_segment_sum(g.values, idx, tf.size(rows))
                ops.append(tf.raw_ops.ResourceSparseApplyMomentum(
                    var=v.handle, accum=accum.handle, lr=tf.constant(self.lr, v.dtype), grad=values,
                    indices=rows, momentum=tf.constant(self.momentum, v.dtype)))
            else:
                ops.append(tf.raw_ops.ResourceApplyMomentum(
                    var=v.handle, accum=accum.handle, lr=tf.constant(self.lr, v.dtype), grad=g,
                    momentum=tf.constant(self.momentum, v.dtype)))
        return tf.group(*ops)


def glorot(rng, fan_in, fan_out):
    import numpy as np

    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)


def mlp_model(tf, args):
    """Variables and forward pass of the MLP, and its data."""
    import numpy as np
    import train  # train.py: the same digits split

    x_train, y_train, x_test, y_test = train.load_data(argparse.Namespace(job="chief"), 1)
    sizes = [64, args.hidden, args.hidden // 2, 10]
    variables = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        rng = np.random.default_rng(args.seed + i)
        variables.append(tf.Variable(glorot(rng, fan_in, fan_out), name=f"w{i}"))
        variables.append(tf.Variable(np.zeros(fan_out, np.float32), name=f"b{i}"))

    def forward(x, values):
        h = x
        for i in range(len(values) // 2):
            h = tf.matmul(h, values[2 * i]) + values[2 * i + 1]
            if i < len(values) // 2 - 1:
                h = tf.nn.relu(h)
        return h

    def forward_np(x, values):
        h = x
        for i in range(len(values) // 2):
            h = h @ values[2 * i] + values[2 * i + 1]
            if i < len(values) // 2 - 1:
                h = np.maximum(h, 0)
        return h

    def dataset_fn():
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        return ds.shuffle(len(x_train), seed=args.seed, reshuffle_each_iteration=True).repeat().batch(
            args.batch, drop_remainder=True).prefetch(2)

    def model_step(batch, variables):
        x, y = batch
        logits = forward(x, variables)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    def evaluate(values):
        logits = forward_np(x_test, values)
        z = logits - logits.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        loss = float(-logp[np.arange(len(y_test)), y_test].mean())
        return float((logits.argmax(axis=1) == y_test).mean()), loss

    return variables, dataset_fn, model_step, evaluate


def embedding_model(tf, args):
    """A table on the ps read with tf.gather, its data as ragged bags."""
    import numpy as np
    import train  # train.py: the same synthetic bags of tokens

    ids_train, y_train, ids_test, y_test = train.embedding_data(args.vocab)
    rng = np.random.default_rng(args.seed)
    table = tf.Variable((rng.standard_normal((args.vocab, args.embed_dim)) * train.EMB_INIT_STDDEV)
                        .astype(np.float32), name="embedding")
    w = tf.Variable(glorot(np.random.default_rng(args.seed + 1), args.embed_dim, train.EMB_CLASSES), name="w0")
    b = tf.Variable(np.zeros(train.EMB_CLASSES, np.float32), name="b0")
    variables = [table, w, b]

    def dataset_fn():
        bags = tf.RaggedTensor.from_row_lengths(
            np.concatenate(ids_train), np.array([len(i) for i in ids_train], np.int64))
        ds = tf.data.Dataset.from_tensor_slices((bags, y_train))
        return ds.shuffle(len(ids_train), seed=args.seed, reshuffle_each_iteration=True).repeat().batch(
            args.batch, drop_remainder=True).prefetch(2)

    def model_step(batch, variables):
        bags, y = batch
        table, w, b = variables
        rows = tf.gather(table, bags.values)  # ResourceGather, on the table's ps
        h = tf.math.segment_mean(rows, bags.value_rowids())
        logits = tf.matmul(h, w) + b
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    def evaluate(values):
        table, w, b = values
        h = np.stack([table[i].mean(axis=0) for i in ids_test])
        logits = h @ w + b
        z = logits - logits.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        loss = float(-logp[np.arange(len(y_test)), y_test].mean())
        return float((logits.argmax(axis=1) == y_test).mean()), loss

    return variables, dataset_fn, model_step, evaluate


def fingerprint(tf, x):
    """Two exact sums over the bits of a float32 tensor: its low and high 16
    bits, each weighted by its position modulo 1000 (every partial sum stays
    below 2**53, so float64 adds them exactly, in any order)."""
    bits = tf.bitcast(tf.reshape(x, [-1]), tf.int32)
    weights = tf.cast(tf.range(tf.size(bits)) % 1000 + 1, tf.float64)
    low = tf.cast(tf.bitwise.bitwise_and(bits, 0xFFFF), tf.float64)
    high = tf.cast(tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits, 16), 0xFFFF), tf.float64)
    return tf.stack([tf.reduce_sum(low * weights), tf.reduce_sum(high * weights)])


def check_final_read(tf, variables, values, directory):
    """How many variables the coordinator read (`values`, from v.numpy()),
    saved in a checkpoint, or exported in a SavedModel (what Keras'
    `model.save` writes for a TF model) other than bit for bit, judged by
    fingerprints computed where each variable lives: only two float64 sums
    cross back."""
    import numpy as np

    os.makedirs(directory, exist_ok=True)
    named = {f"v{i}": v for i, v in enumerate(variables)}
    path = tf.train.Checkpoint(**named).write(os.path.join(directory, "final"))
    saved = tf.train.load_checkpoint(path)
    module = tf.Module()
    for key, v in named.items():
        setattr(module, key, v)
    export = os.path.join(directory, "saved_model")
    tf.saved_model.save(module, export)
    exported = tf.saved_model.load(export)
    read_off, saved_off, exported_off, names = 0, 0, 0, []
    for i, (v, value) in enumerate(zip(variables, values)):
        with tf.device(v.device):
            truth = fingerprint(tf, v.read_value()).numpy()

        def same(x):
            return np.array_equal(fingerprint(tf, tf.constant(x)).numpy(), truth)

        read_ok = same(value)
        saved_ok = same(saved.get_tensor(f"v{i}/.ATTRIBUTES/VARIABLE_VALUE"))
        exported_ok = same(getattr(exported, f"v{i}").numpy())
        read_off += not read_ok
        saved_off += not saved_ok
        exported_off += not exported_ok
        if not (read_ok and saved_ok and exported_ok):
            names.append(v.name)
    return {"variables": len(variables), "read_differs": read_off, "saved_differs": saved_off,
            "exported_differs": exported_off, "differing": names}


def run_coordinator(tf, resolver, args, name):
    import numpy as np

    sys.path.insert(0, here)
    tf.random.set_seed(args.seed)
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    log(name, f"connected: {strategy.extended._num_workers} workers, {strategy.extended._num_ps} ps")

    build = mlp_model if args.model == "mlp" else embedding_model
    with strategy.scope():
        variables, dataset_fn, model_step, evaluate = build(tf, args)
        optimizer = Momentum(tf, strategy, variables, args.lr, args.momentum)
        steps_done = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps_done")
    params = int(sum(np.prod(v.shape) for v in variables))
    placement = {v.name: v.device for v in variables + [steps_done]}
    log(name, f"{params} parameters; placement {placement}")

    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(lambda _: dataset_fn())

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    checked = [i for i, v in enumerate(variables) if args.check_pulls and v.shape.num_elements() * 4 >= 65536]

    @tf.function
    def train_step(iterator):
        def replica_fn(batch):
            with tf.GradientTape() as tape:
                if not checked:
                    loss = model_step(batch, variables)
                else:
                    # One read per variable on its ps, sent twice: as the float
                    # tensor the model uses (what a sidecar may compress) and
                    # bitcast to int32 (passed as it is): the relative error of
                    # the first is what the worker got wrong.
                    # (XOR with a constant, so that Grappler cannot fold the
                    # two bitcasts away.)
                    reads, exact, key = list(variables), {}, tf.constant(0x5A5A5A5A, tf.int32)
                    for i in checked:
                        with tf.device(variables[i].device):
                            reads[i] = variables[i].read_value()
                            bits = tf.bitwise.bitwise_xor(tf.bitcast(reads[i], tf.int32), key)
                        exact[i] = tf.bitcast(tf.bitwise.bitwise_xor(bits, key), tf.float32)
                    loss = model_step(batch, reads)
                    errors = tf.stack([tf.norm(reads[i] - exact[i]) / (tf.norm(exact[i]) + 1e-30) for i in checked])
            grads = tape.gradient(loss, variables)
            optimizer.apply_gradients(zip(grads, variables))
            steps_done.assign_add(1)
            return (loss, errors) if checked else loss

        out = strategy.run(replica_fn, args=(next(iterator),))
        # Only the loss (and the errors) go back to the coordinator.
        if not checked:
            return strategy.reduce(tf.distribute.ReduceOp.SUM, out, axis=None)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, out[0], axis=None), out[1]

    def loss_of(remote):
        return remote.fetch()[0] if checked else remote.fetch()

    log(name, f"training {args.steps} steps ({args.model}, batch {args.batch}, lr {args.lr}, "
              f"momentum {args.momentum})")
    started = time.time()
    losses = []
    for step in range(args.steps):
        losses.append(coordinator.schedule(train_step, args=(per_worker_iterator,)))
        if step + 1 == args.warmup_steps:
            coordinator.join()
            warm = time.time()
            log(name, f"{args.warmup_steps} warm-up steps done in {warm - started:.2f}s")
        if args.log_every and (step + 1) % args.log_every == 0:
            log(name, f"step {step + 1}: loss {loss_of(losses[-1]):.4f}")
    coordinator.join()
    ended = time.time()
    if args.warmup_steps == 0:
        warm = started
    final_loss = float(np.mean([loss_of(l) for l in losses[-20:]]))
    pull_errors = None
    if checked:
        errs = np.array([l.fetch()[1] for l in losses])  # steps x checked variables
        pull_errors = {variables[i].name: {"max": float(errs[:, c].max()), "median": float(np.median(errs[:, c])),
                                           "over_0.1": int((errs[:, c] > 0.1).sum())}
                       for c, i in enumerate(checked)}
        log(name, f"relative error of the pulled values: {json.dumps(pull_errors)}")
    done = int(steps_done.numpy())
    values = [v.numpy() for v in variables]
    accuracy, test_loss = evaluate(values)
    final_read = check_final_read(tf, variables, values, args.check_final_read) if args.check_final_read else None
    result = {
        "model": args.model, "steps": args.steps, "steps_done": done, "seconds": round(ended - started, 3),
        "step_seconds": round((ended - warm) / (args.steps - args.warmup_steps), 5),
        "warmup_seconds": round(warm - started, 3), "startup_seconds": round(started - PROCESS_START, 3),
        "train_loss_last20": round(final_loss, 5), "test_accuracy": round(accuracy, 5),
        "test_loss": round(test_loss, 5), "params": params, "batch": args.batch, "lr": args.lr,
        "momentum": args.momentum, "seed": args.seed, "placement": placement,
        "workers": strategy.extended._num_workers, "ps": strategy.extended._num_ps,
    }
    if pull_errors is not None:
        result["pull_errors"] = pull_errors
    if final_read is not None:
        result["final_read"] = final_read
        log(name, f"final read: {json.dumps(final_read)}")
    log(name, "result " + json.dumps(result, sort_keys=True))
    if args.result:
        tmp = args.result + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, args.result)
    if done != args.steps:
        log(name, f"ERROR: {done} steps applied, {args.steps} scheduled")
        return 1
    return 0


def main(argv=None):
    args = parse_args(argv)
    cluster, task_type, task_index = tf_config()
    name = f"{task_type}{task_index}"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    tf.get_logger().setLevel("WARN")
    log(name, f"tensorflow {tf.__version__} imported; cluster {json.dumps(cluster, sort_keys=True)}")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if task_type in ("worker", "ps"):
        run_server(tf, resolver, name)
        status = 0
    elif task_type == "chief":
        status = run_coordinator(tf, resolver, args, name)
    else:
        sys.exit(f"train_tf2: task type '{task_type}' is not chief, worker or ps")
    sys.stdout.flush()
    sys.stderr.flush()
    # The eager context's remote connections and TF's gRPC threads can keep a
    # normal interpreter exit waiting; everything is written by now.
    os._exit(status)


if __name__ == "__main__":
    main()
