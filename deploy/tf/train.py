#!/usr/bin/env python3
"""Parameter-server training (sync or async) of an MLP, embedding models or conv nets.

Plain TensorFlow 1.x-style between-graph replication (tf.compat.v1 on TF 2.x):
tf.train.Server, replica_device_setter, SyncReplicasOptimizer (or each worker
applying its own gradients) and MonitoredTrainingSession. Nothing here knows
about any proxy or sidecar: every task simply dials its peers at the addresses
its own cluster spec gives them.

    train.py --job ps     --task 0 --ps 127.0.0.1:2222 --workers 127.0.0.1:2223,127.0.0.1:2224
    train.py --job worker --task 0 --ps 127.0.0.1:2222 --workers 127.0.0.1:2223,127.0.0.1:2224
    train.py --job worker --task 1 --ps 127.0.0.1:2222 --workers 127.0.0.1:2223,127.0.0.1:2224

Or, as on Kubernetes under a training operator, no cluster flags at all: the
cluster and this task come from $TF_CONFIG.

Each task may be given a different spec: TF binds the port of this task's own
entry and dials every other entry as written, so a peer can be pointed at a
local proxy port. Worker 0 is the chief.

Models (--model): mlp (default) on scikit-learn's digits; embedding, a
bag-of-tokens classifier reading a 20000 x 32 table on the ps with
tf.nn.embedding_lookup (sparse IndexedSlices gradients; split over the ps
tasks with --partition); widedeep, a wide-and-deep click model over five
multi-hot fields (tf.nn.embedding_lookup_sparse on partitioned tables,
Adagrad); resnet, a ResNet-20-style conv net on generated 32x32x3 images;
bnconv, a small conv net with hand-built batch norm (moving statistics on
the ps) on the same images. The data of all but mlp are generated
deterministically from fixed seeds, so every task and every run sees the
same examples.
"""

import argparse
import json
import os
import sys
import time

PROCESS_START = time.time()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402  (the model zoo: imports no TensorFlow itself)

# Fixed, seed-independent train/test split, so accuracies from runs with
# different --seed values are measured on the same held-out digits.
SPLIT_SEED = 0
TEST_FRACTION = 0.2

HARNESS_MODELS = ("mlp", "embedding", "widedeep", "resnet", "bnconv")
MODELS = HARNESS_MODELS + tuple(zoo.BY_NAME)
# Per-model defaults of the flags that default to None.
MODEL_DEFAULTS = {
    "mlp": {"batch": 64, "lr": 0.1, "momentum": 0.9, "optimizer": "momentum"},
    "embedding": {"batch": 128, "lr": 1.0, "momentum": 0.9, "optimizer": "momentum", "embed_dim": 32},
    "widedeep": {"batch": 128, "lr": 0.5, "momentum": 0.0, "optimizer": "adagrad", "embed_dim": 16},
    "resnet": {"batch": 32, "lr": 0.003, "momentum": 0.9, "optimizer": "momentum"},
    "bnconv": {"batch": 32, "lr": 0.05, "momentum": 0.9, "optimizer": "momentum"},
    **{m.name: m.defaults for m in zoo.MEMBERS},
}
OPTIMIZERS = ("momentum", "adagrad", "ftrl", "adam")
# Models whose tables --partition splits.
PARTITIONED = ("embedding", "widedeep")
# Asynchronous training applies each worker's gradient on arrival against a
# model that moved since it was read: the ResNet's synchronous rate diverged
# on some seeds without tlcd (93.2 / 93.6 / 17.6% at 300 steps, seeds 0-2);
# a third of it trained on all (92.0 / 93.4 / 90.6%). bnconv's 0.05 gave
# 88.5 and 86.3% asynchronously at 200 steps without tlcd (81.0 and 83.9%
# through it), 0.02 gave 93.6 and 93.0% (93.3 and 92.3% through tlcd).
ASYNC_DEFAULTS = {"resnet": {"lr": 0.001}, "bnconv": {"lr": 0.02}}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", choices=["ps", "worker"],
                   help="this task's job (default: task.type of $TF_CONFIG)")
    p.add_argument("--task", type=int, help="index within --job (default: task.index of $TF_CONFIG)")
    p.add_argument("--ps", help="HOST:PORT[,HOST:PORT...] as this task sees them (default: $TF_CONFIG's)")
    p.add_argument("--workers", help="HOST:PORT,HOST:PORT... as this task sees them (default: $TF_CONFIG's)")
    p.add_argument("--model", choices=MODELS, default="mlp",
                   help="mlp (digits), embedding (sparse lookups in a table on the ps), widedeep (multi-hot "
                        "fields over partitioned tables, Adagrad), resnet (ResNet-20 on generated images) or "
                        "bnconv (a conv net with batch norm, the same images), or a member of the model zoo "
                        "(deploy/tf/zoo.py: " + ", ".join(zoo.BY_NAME) + ") (default mlp)")
    p.add_argument("--mode", choices=["sync", "async"], default="sync",
                   help="sync: SyncReplicasOptimizer averages one gradient per worker per global step; "
                        "async: every worker applies its own gradients (default sync)")
    p.add_argument("--steps", type=int, default=200,
                   help="global steps (default 200); in async mode the workers share them")
    p.add_argument("--batch", type=int, default=None,
                   help="per-worker batch size (default: mlp 64, embedding and widedeep 128, resnet and "
                        "bnconv 32)")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default: mlp 0.1, embedding 1.0, widedeep 0.5, resnet 0.003 sync / "
                        "0.001 async, bnconv 0.05 sync / 0.02 async)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None,
                   help="momentum (SGD with --momentum), adagrad, ftrl or adam (default: widedeep adagrad, "
                        "the zoo's its own, the others momentum)")
    p.add_argument("--momentum", type=float, default=None,
                   help="SGD momentum, 0 for plain SGD (default 0.9)")
    p.add_argument("--hidden", type=int, default=1024,
                   help="mlp: width of the first hidden layer; the second is half (default 1024: 596,490 params)")
    p.add_argument("--vocab", type=int, default=20000, help="embedding: rows of the table (default 20000)")
    p.add_argument("--embed-dim", type=int, default=None,
                   help="embedding, widedeep: columns of the tables (default: embedding 32, widedeep 16)")
    p.add_argument("--partition", type=int, default=0,
                   help="embedding, widedeep: split each table into N shards with fixed_size_partitioner, "
                        "placed over the ps tasks (default 0: one shard per ps task)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="the chief writes checkpoints here and a rebuilt session restores the last one "
                        "(MonitoredTrainingSession checkpoint_dir; default: none)")
    p.add_argument("--save-checkpoint-steps", type=int, default=50,
                   help="with --checkpoint-dir: a checkpoint every N global steps (default 50)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check-final-read", action="store_true",
                   help="after training, the chief reads every trainable variable through the cluster "
                        "(RecvTensor from the ps, where sidecars sit) and fetches it from the ps directly "
                        "(RunGraph's own response), and reports the largest difference "
                        "(final_read_max_diff: 0 when what a worker reads after training is the model); "
                        "before that, saves the model with an unsharded Saver (the chief reads every "
                        "variable) and restores it (the chief sends every value to be assigned), and "
                        "reports how far that moved the ps's values (restore_max_diff: 0 when both "
                        "crossed exactly); with --eval-every, the same read at each evaluation, while "
                        "training runs (eval_read_max_diff, and eval_read_max_rel_l2 against the model; "
                        "synchronous jobs, where the other workers wait for the chief's evaluation)")
    p.add_argument("--log-every", type=int, default=0,
                   help="log this worker's training loss every N local steps (default 0: never)")
    p.add_argument("--eval-every", type=int, default=0,
                   help="the chief evaluates on the test set every N of its local steps and records "
                        "(step, training seconds, accuracy) in its result's `curve`; the clock stops "
                        "while it evaluates, and the job waits for it (default 0: only at the end)")
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
    cluster_from_tf_config(p, args)
    defaults = dict(MODEL_DEFAULTS[args.model])
    if args.mode == "async":
        defaults.update(ASYNC_DEFAULTS.get(args.model, {}))
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.partition < 0:
        p.error("--partition must be 0 (one shard per ps task) or a number of shards")
    if args.partition > 1 and args.model not in PARTITIONED:
        p.error(f"--partition applies to --model {' and '.join(PARTITIONED)} only")
    args.ps_hosts = [h for h in args.ps.split(",") if h]
    args.worker_hosts = [h for h in args.workers.split(",") if h]
    if not args.ps_hosts or not args.worker_hosts:
        p.error("--ps and --workers need at least one HOST:PORT each")
    n = len(args.ps_hosts if args.job == "ps" else args.worker_hosts)
    if not 0 <= args.task < n:
        p.error(f"--task {args.task} out of range for {n} {args.job} task(s)")
    return args


def cluster_from_tf_config(p, args):
    """Fills --job, --task, --ps and --workers left out from $TF_CONFIG, the way
    a training operator (Kubeflow's TFJob) describes the cluster to each task:
    {"cluster": {"ps": [...], "worker": [...]}, "task": {"type": "ps", "index": 0}}."""
    missing = [name for name in ("job", "task", "ps", "workers") if getattr(args, name) is None]
    if not missing:
        return
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        p.error(f"--{', --'.join(missing)} not given and TF_CONFIG is not set")
    try:
        config = json.loads(raw)
        cluster, task = config["cluster"], config.get("task", {})
        from_config = {"job": task.get("type"), "task": task.get("index"),
                       "ps": ",".join(cluster.get("ps", [])), "workers": ",".join(cluster.get("worker", []))}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        p.error(f"TF_CONFIG is not a cluster description: {err}")
    for name in missing:
        setattr(args, name, from_config[name])
    if args.job not in ("ps", "worker") or not isinstance(args.task, int):
        p.error(f"TF_CONFIG: task type {args.job!r} index {args.task!r}: expected ps or worker and an index")


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


# ---- embedding model: a bag-of-tokens classifier over a table on the ps ----

# Fixed, seed-independent data (like SPLIT_SEED): runs with different --seed
# values train and test on the same examples.
EMB_DATA_SEED = 1
EMB_CLASSES = 10
EMB_TOPIC_TOKENS = 40  # per class
EMB_TRAIN, EMB_TEST = 24000, 3000
EMB_EVAL_CHUNK = 1000
EMB_HIDDEN = 0  # no hidden layer: mean(rows) -> logits
EMB_INIT_STDDEV = 0.1


def embedding_data(vocab):
    """Examples are bags of 8-16 token ids. Background tokens follow a
    Zipf-like law (frequent ids are gathered in nearly every step, rare ones
    hardly ever) and carry no information. Each class owns 40 "topic" tokens
    that never occur as background; an example of class c holds 1-3 of c's
    topic tokens and, 40% of the time, one topic token of another class.
    Only rows of topic tokens that have been learnt tell the classes apart
    (about 1 example in 6 is ambiguous: one topic token of each of two
    classes). Token ids are a fixed permutation of the Zipf ranks, so the
    frequent rows are spread over the table and its shards.

    Returns (ids, labels) for train and test: ids a list of int64 arrays."""
    import numpy as np

    rng = np.random.default_rng(EMB_DATA_SEED)
    token_of_rank = rng.permutation(vocab).astype(np.int64)
    topic_ranks = rng.choice(np.arange(20, min(vocab, 4020)), size=(EMB_CLASSES, EMB_TOPIC_TOKENS), replace=False)
    topics = token_of_rank[topic_ranks]
    weight = 1.0 / (np.arange(vocab) + 10.0)
    weight[topic_ranks.ravel()] = 0.0
    background = weight / weight.sum()

    n = EMB_TRAIN + EMB_TEST
    labels = rng.integers(0, EMB_CLASSES, n)
    lengths = rng.integers(8, 17, n)
    own = rng.integers(1, 4, n)
    confused = rng.random(n) < 0.4
    other = (labels + rng.integers(1, EMB_CLASSES, n)) % EMB_CLASSES
    counts = lengths - own - confused
    bg = token_of_rank[rng.choice(vocab, size=int(counts.sum()), p=background)]
    picks = rng.integers(0, EMB_TOPIC_TOKENS, (n, 4))
    ids, at = [], 0
    for i in range(n):
        parts = [topics[labels[i], picks[i, :own[i]]]]
        if confused[i]:
            parts.append(topics[other[i], picks[i, 3:]])
        parts.append(bg[at:at + counts[i]])
        at += counts[i]
        ids.append(np.concatenate(parts))
    labels = labels.astype(np.int64)
    return ids[:EMB_TRAIN], labels[:EMB_TRAIN], ids[EMB_TRAIN:], labels[EMB_TRAIN:]


def bag_batch(ids, labels, idx):
    """Flat ids, the example each id belongs to, and the labels."""
    return zoo.bag(ids, labels, idx)


def bag_batches(ids, labels, batch, seed):
    """Endless shuffled epochs over this worker's shard of bags."""
    import numpy as np

    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(ids))
        for start in range(0, len(order) - batch + 1, batch):
            yield bag_batch(ids, labels, order[start:start + batch])


def build_embedding(tf, args, shards):
    """mean(table[ids]) per bag -> one dense layer (32 x 10) -> 10 classes.
    tf.nn.embedding_lookup on a variable held by a ps gathers the rows there
    and sends only them; the table's gradient is IndexedSlices. With
    shards > 1 the table is a PartitionedVariable: one Gather per shard (on
    that shard's ps) and a DynamicStitch on the worker."""
    tf.compat.v1.set_random_seed(args.seed)
    ids = tf.compat.v1.placeholder(tf.int64, [None], name="ids")
    segments = tf.compat.v1.placeholder(tf.int32, [None], name="segments")
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
    table = tf.compat.v1.get_variable(
        "embedding", [args.vocab, args.embed_dim], tf.float32,
        tf.compat.v1.random_normal_initializer(stddev=EMB_INIT_STDDEV, seed=args.seed),
        partitioner=tf.compat.v1.fixed_size_partitioner(shards) if shards > 1 else None)
    rows = tf.compat.v1.nn.embedding_lookup(table, ids, partition_strategy="div")
    h = tf.math.segment_mean(rows, segments)
    sizes = [args.embed_dim] + ([EMB_HIDDEN] if EMB_HIDDEN else []) + [EMB_CLASSES]
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        w = tf.compat.v1.get_variable(
            f"w{i}", [fan_in, fan_out], tf.float32,
            tf.compat.v1.glorot_uniform_initializer(seed=args.seed + 1 + i))
        b = tf.compat.v1.get_variable(f"b{i}", [fan_out], tf.float32, tf.compat.v1.zeros_initializer())
        h = tf.matmul(h, w) + b
        if i < len(sizes) - 2:
            h = tf.nn.relu(h)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(h, 1), y), tf.float32))
    return (ids, segments, y), loss, accuracy


# ---- widedeep: a wide-and-deep click model over multi-hot fields ----

# Fixed, seed-independent data, as for the embedding model.
WD_DATA_SEED = 3
# Rows of each field's tables: the ids of a field follow a Zipf-like law, so
# a few hundred rows are looked up in nearly every step and most hardly ever.
WD_VOCABS = (50000, 30000, 20000, 10000, 10000)
WD_MAX_IDS = 4  # ids per field and example: 1 to 4
WD_LATENT = 4  # dimensions of the generator's hidden id vectors (field interactions)
WD_SIGNAL_RANKS = 500  # the most frequent ids of each field carry the signal ...
WD_RARE_SCALE = 0.2  # ... the others a fifth of it
WD_INTERACTION = 0.5  # weight of the pairwise field interactions in the score
WD_NOISE = 0.3  # scale of the logistic label noise
WD_TRAIN, WD_TEST = 60000, 5000
WD_EVAL_CHUNK = 1000
WD_HIDDEN = (64, 32)
WD_INIT_STDDEV = 0.05


def widedeep_data():
    """Click-like examples: WD_VOCABS[f] ids per field f, 1-4 of them per
    example and field (multi-hot), drawn from a Zipf-like law over a fixed
    permutation of the ids. Every id has a hidden effect and a hidden vector
    (standard normal for the 500 most frequent ids of a field, a fifth of
    that for the rest); an example's score is the sum over fields of the
    mean effect of its ids, plus half the dot products of the fields' mean
    hidden vectors for the pairs (0, 1) and (2, 3) (what the deep part can
    learn and a linear model cannot); the label is 1 where the score plus
    logistic noise is above the median score (half the labels are 1). The
    best possible accuracy is about 86 %; about 85 % knowing only the 500
    frequent ids of each field, 84 % with the linear part only.

    Returns (fields, labels) for train and test: fields a list, per field, of
    an int64 array [examples, WD_MAX_IDS] of ids padded with -1."""
    import numpy as np

    rng = np.random.default_rng(WD_DATA_SEED)
    n = WD_TRAIN + WD_TEST
    score = np.zeros(n)
    fields, hidden = [], []
    for vocab in WD_VOCABS:
        token_of_rank = rng.permutation(vocab).astype(np.int64)
        weight = 1.0 / (np.arange(vocab) + 10.0)
        lengths = rng.integers(1, WD_MAX_IDS + 1, n)
        mask = np.arange(WD_MAX_IDS)[None, :] < lengths[:, None]
        ranks = np.zeros((n, WD_MAX_IDS), np.int64)
        ranks[mask] = rng.choice(vocab, size=int(lengths.sum()), p=weight / weight.sum())
        scale = np.where(np.arange(vocab) < WD_SIGNAL_RANKS, 1.0, WD_RARE_SCALE)  # by rank
        effect = rng.normal(0.0, 1.0, vocab) * scale
        vectors = rng.normal(0.0, 1.0, (vocab, WD_LATENT)) * scale[:, None]
        score += np.where(mask, effect[ranks], 0.0).sum(1) / lengths
        hidden.append(np.where(mask[..., None], vectors[ranks], 0.0).sum(1) / lengths[:, None])
        fields.append(np.where(mask, token_of_rank[ranks], -1))
    score += WD_INTERACTION * ((hidden[0] * hidden[1]).sum(1) + (hidden[2] * hidden[3]).sum(1))
    labels = (score + rng.logistic(0.0, WD_NOISE, n) > np.median(score)).astype(np.int64)
    return ([f[:WD_TRAIN] for f in fields], labels[:WD_TRAIN],
            [f[WD_TRAIN:] for f in fields], labels[WD_TRAIN:])


def widedeep_feed(placeholders, fields, labels, idx):
    """A feed dict of examples idx: one SparseTensorValue of ids per field."""
    return zoo.multi_hot_feed(placeholders, fields, labels, idx)


def widedeep_batches(placeholders, fields, labels, batch, seed):
    """Endless shuffled epochs over this worker's shard, as feed dicts."""
    import numpy as np

    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(labels))
        for start in range(0, len(order) - batch + 1, batch):
            yield widedeep_feed(placeholders, fields, labels, order[start:start + batch])


def build_widedeep(tf, args, shards):
    """Wide and deep (Cheng et al. 2016): per field a deep table
    [vocab, embed_dim] (tf.nn.embedding_lookup_sparse, combiner mean) and a
    wide table [vocab, 1] (the same ids, combiner sum: a linear model over
    the sparse ids), each split into `shards` with fixed_size_partitioner
    (one Gather per shard on its ps, over the unique ids of the batch); the
    concatenated means go through a ReLU MLP (64, 32) whose output is added
    to the wide part's: one logit, sigmoid cross entropy. The tables'
    gradients are IndexedSlices over the unique ids."""
    tf.compat.v1.set_random_seed(args.seed)
    sparse = [tf.compat.v1.sparse_placeholder(tf.int64, [None, WD_MAX_IDS], name=f"field{f}")
              for f in range(len(WD_VOCABS))]
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
    partitioner = tf.compat.v1.fixed_size_partitioner(shards) if shards > 1 else None
    deep, wide = [], []
    for f, (ids, vocab) in enumerate(zip(sparse, WD_VOCABS)):
        table = tf.compat.v1.get_variable(
            f"deep/field{f}", [vocab, args.embed_dim], tf.float32,
            tf.compat.v1.random_normal_initializer(stddev=WD_INIT_STDDEV, seed=args.seed + f),
            partitioner=partitioner)
        deep.append(tf.compat.v1.nn.embedding_lookup_sparse(
            table, ids, None, partition_strategy="div", combiner="mean"))
        linear = tf.compat.v1.get_variable(
            f"wide/field{f}", [vocab, 1], tf.float32, tf.compat.v1.zeros_initializer(), partitioner=partitioner)
        wide.append(tf.compat.v1.nn.embedding_lookup_sparse(
            linear, ids, None, partition_strategy="div", combiner="sum"))
    h = tf.concat(deep, 1)
    sizes = [len(WD_VOCABS) * args.embed_dim, *WD_HIDDEN, 1]
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        w = tf.compat.v1.get_variable(
            f"deep/w{i}", [fan_in, fan_out], tf.float32,
            tf.compat.v1.glorot_uniform_initializer(seed=args.seed + 100 + i))
        b = tf.compat.v1.get_variable(f"deep/b{i}", [fan_out], tf.float32, tf.compat.v1.zeros_initializer())
        h = tf.matmul(h, w) + b
        if i < len(sizes) - 2:
            h = tf.nn.relu(h)
    bias = tf.compat.v1.get_variable("wide/bias", [1], tf.float32, tf.compat.v1.zeros_initializer())
    logit = tf.squeeze(h + tf.add_n(wide) + bias, 1)
    labels = tf.cast(y, tf.float32)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logit))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.cast(logit > 0, tf.int64), y), tf.float32))
    return (*sparse, y), loss, accuracy


# ---- resnet: a ResNet-20-style conv net on generated images ----

IMG_DATA_SEED = 2
IMG_CLASSES = 10
# 5000 test images: with 1000, the test set's sampling alone moved accuracy by
# about 0.8 points (binomial SD at 93%), more than the 0.5 points tlc is judged by.
IMG_TRAIN, IMG_TEST = 8000, 5000
IMG_EVAL_CHUNK = 250
IMG_NOISE = 0.7  # standard deviation of the pixel noise; the grating's amplitude is 0.2-1
IMG_ANGLE_JITTER = 0.15  # radians; the classes' angles are pi/5 apart
IMG_FREQ_JITTER = 0.15  # relative; the classes' frequencies are 2 and 4 cycles per image


def image_data():
    """The resnet's and bnconv's images: zoo.grating_images with 2 and 4
    cycles per image. Returns x_train, y_train, x_test, y_test."""
    return zoo.grating_images(IMG_DATA_SEED, IMG_TRAIN, IMG_TEST, (2.0, 4.0), IMG_ANGLE_JITTER, IMG_FREQ_JITTER,
                              IMG_NOISE)


def build_resnet(tf, args):
    """ResNet-20 (He et al. 2016, CIFAR variant) without batch norm: a 3x3
    stem of 16 channels, 3 stages of 3 basic blocks (16, 32, 64 channels;
    stride 2 and a 1x1 projection at the start of stages 2 and 3), global
    average pooling and a dense layer. Every conv has a bias. Without
    normalisation the second conv of each block starts small (He init x 0.1),
    so the net starts close to its shortcuts. 271,690 parameters in 44
    tensors: 6 of them (the 3x3x32x64 and 3x3x64x64 kernels) are 64 KiB or
    more, the other 38 (biases, 3x3x16x16 kernels, ...) smaller."""
    tf.compat.v1.set_random_seed(args.seed)
    x = tf.compat.v1.placeholder(tf.float32, [None, 32, 32, 3], name="x")
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
    seeds = iter(range(args.seed, args.seed + 1000))

    def conv(h, name, size, width, stride, scale=1.0):
        fan_in = int(h.shape[-1])
        w = tf.compat.v1.get_variable(
            f"{name}/kernel", [size, size, fan_in, width], tf.float32,
            tf.compat.v1.variance_scaling_initializer(
                scale=2.0 * scale * scale, mode="fan_in", distribution="truncated_normal", seed=next(seeds)))
        b = tf.compat.v1.get_variable(f"{name}/bias", [width], tf.float32, tf.compat.v1.zeros_initializer())
        return tf.nn.conv2d(h, w, [1, stride, stride, 1], "SAME") + b

    h = tf.nn.relu(conv(x, "stem", 3, 16, 1))
    for stage, width in enumerate([16, 32, 64]):
        for block in range(3):
            name = f"stage{stage + 1}/block{block + 1}"
            stride = 2 if stage > 0 and block == 0 else 1
            r = tf.nn.relu(conv(h, f"{name}/conv1", 3, width, stride))
            r = conv(r, f"{name}/conv2", 3, width, 1, scale=0.1)
            shortcut = h if stride == 1 else conv(h, f"{name}/shortcut", 1, width, stride)
            h = tf.nn.relu(r + shortcut)
    h = tf.reduce_mean(h, [1, 2])
    w = tf.compat.v1.get_variable(
        "logits/kernel", [64, IMG_CLASSES], tf.float32, tf.compat.v1.glorot_uniform_initializer(seed=next(seeds)))
    b = tf.compat.v1.get_variable("logits/bias", [IMG_CLASSES], tf.float32, tf.compat.v1.zeros_initializer())
    h = tf.matmul(h, w) + b
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(h, 1), y), tf.float32))
    return (x, y), loss, accuracy


# ---- bnconv: a small conv net with hand-built batch norm ----

BN_WIDTHS = ((32, 1), (64, 2), (128, 2))  # (channels, stride) of the 3x3 convs
BN_DECAY = 0.95  # of the moving mean and variance, per update (each worker's step updates them)
BN_EPSILON = 1e-3


def build_bnconv(tf, args):
    """Three 3x3 convs (32, 64, 128 channels; strides 1, 2, 2), each followed
    by batch norm and a ReLU, global average pooling and a dense layer, on
    the resnet's images. Batch norm is built by hand (Keras 3 took
    tf.compat.v1.layers.batch_normalization away): gamma and beta are
    trained; the moving mean and variance are non-trainable variables on the
    ps, moved towards each training batch's moments by AssignSub ops that
    run with every step. The net is built twice over the same variables:
    once normalising by the batch's moments (training), once by the moving
    statistics (the test loss and accuracy).

    Returns the placeholders, the training loss and accuracy, the moving
    statistics' update ops, and the inference loss and accuracy."""
    tf.compat.v1.set_random_seed(args.seed)
    x = tf.compat.v1.placeholder(tf.float32, [None, 32, 32, 3], name="x")
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
    updates = []

    def batch_norm(h, training):
        return zoo.batch_norm(tf, h, training, updates, BN_DECAY, BN_EPSILON)

    def net(training):
        seeds = iter(range(args.seed, args.seed + 100))
        with tf.compat.v1.variable_scope("bnconv", reuse=tf.compat.v1.AUTO_REUSE):
            h = x
            for i, (width, stride) in enumerate(BN_WIDTHS):
                with tf.compat.v1.variable_scope(f"conv{i + 1}"):
                    kernel = tf.compat.v1.get_variable(
                        "kernel", [3, 3, int(h.shape[-1]), width], tf.float32,
                        tf.compat.v1.variance_scaling_initializer(
                            scale=2.0, mode="fan_in", distribution="truncated_normal", seed=next(seeds)))
                    h = tf.nn.conv2d(h, kernel, [1, stride, stride, 1], "SAME")
                    with tf.compat.v1.variable_scope("bn"):
                        h = tf.nn.relu(batch_norm(h, training))
            h = tf.reduce_mean(h, [1, 2])
            w = tf.compat.v1.get_variable(
                "logits/kernel", [BN_WIDTHS[-1][0], IMG_CLASSES], tf.float32,
                tf.compat.v1.glorot_uniform_initializer(seed=next(seeds)))
            b = tf.compat.v1.get_variable("logits/bias", [IMG_CLASSES], tf.float32, tf.compat.v1.zeros_initializer())
            logits = tf.matmul(h, w) + b
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
        return loss, accuracy

    loss, accuracy = net(training=True)
    test_loss, test_accuracy = net(training=False)
    return (x, y), loss, accuracy, updates, (test_loss, test_accuracy)


class Workload:
    """What run_worker needs of a model: its loss and accuracy, feed dicts
    for training steps, and the test set as (feed dict, examples) chunks;
    optionally ops to run with every training step (batch norm's moving
    statistics) and a test loss and accuracy of their own (inference mode)."""

    def __init__(self, loss, accuracy, train_feeds, test_feeds, info, updates=(), test=None):
        self.loss, self.accuracy = loss, accuracy
        self.train_feeds, self.test_feeds, self.info = train_feeds, test_feeds, info
        self.updates = list(updates)
        self.test_loss, self.test_accuracy = test or (loss, accuracy)


def load_workload_data(args, num_workers):
    """The data, before any graph is built (seed-independent)."""
    if args.model in zoo.BY_NAME:
        return zoo.load(args, num_workers)
    if args.model == "mlp":
        return load_data(args, num_workers)
    if args.model == "embedding":
        data = embedding_data(args.vocab)
    elif args.model == "widedeep":
        fields, train_y, test_fields, test_y = widedeep_data()
        if args.job == "worker":
            fields, train_y = [f[args.task::num_workers] for f in fields], train_y[args.task::num_workers]
        return fields, train_y, test_fields, test_y
    else:
        data = image_data()
    train_x, train_y, test_x, test_y = data
    if args.job == "worker":
        train_x, train_y = train_x[args.task::num_workers], train_y[args.task::num_workers]
    return train_x, train_y, test_x, test_y


def build_workload(tf, args, data, num_ps):
    """The model's graph (under the caller's device setter) and its feeds."""
    if args.model in zoo.BY_NAME:
        return Workload(**zoo.build(tf, args, data, num_ps))
    x_train, y_train, x_test, y_test = data
    seed = args.seed * 1000 + args.task
    if args.model == "mlp":
        x, y, loss, accuracy = build_model(tf, args)
        train = ({x: xb, y: yb} for xb, yb in batches(x_train, y_train, args.batch, seed=seed))
        return Workload(loss, accuracy, train, [({x: x_test, y: y_test}, len(y_test))], {})
    if args.model == "embedding":
        shards = args.partition or num_ps
        (ids, segments, y), loss, accuracy = build_embedding(tf, args, shards)
        train = ({ids: i, segments: s, y: yb} for i, s, yb in bag_batches(x_train, y_train, args.batch, seed))
        test = []
        for start in range(0, len(y_test), EMB_EVAL_CHUNK):
            i, s, yb = bag_batch(x_test, y_test, range(start, min(start + EMB_EVAL_CHUNK, len(y_test))))
            test.append(({ids: i, segments: s, y: yb}, len(yb)))
        return Workload(loss, accuracy, train, test,
                        {"partitions": shards, "vocab": args.vocab, "embed_dim": args.embed_dim})
    if args.model == "widedeep":
        shards = args.partition or num_ps
        placeholders, loss, accuracy = build_widedeep(tf, args, shards)
        train = widedeep_batches(placeholders, x_train, y_train, args.batch, seed)
        test = [(widedeep_feed(placeholders, x_test, y_test, range(i, min(i + WD_EVAL_CHUNK, len(y_test)))),
                 len(y_test[i:i + WD_EVAL_CHUNK])) for i in range(0, len(y_test), WD_EVAL_CHUNK)]
        return Workload(loss, accuracy, train, test,
                        {"partitions": shards, "vocab": list(WD_VOCABS), "embed_dim": args.embed_dim})
    updates, test_metrics = (), None
    if args.model == "bnconv":
        (x, y), loss, accuracy, updates, test_metrics = build_bnconv(tf, args)
    else:
        (x, y), loss, accuracy = build_resnet(tf, args)
    train = ({x: xb, y: yb} for xb, yb in batches(x_train, y_train, args.batch, seed=seed))
    test = [({x: x_test[i:i + IMG_EVAL_CHUNK], y: y_test[i:i + IMG_EVAL_CHUNK]}, len(y_test[i:i + IMG_EVAL_CHUNK]))
            for i in range(0, len(y_test), IMG_EVAL_CHUNK)]
    return Workload(loss, accuracy, train, test, {}, updates=updates, test=test_metrics)


def make_optimizer(tf, args):
    """The optimizer each worker applies (inside SyncReplicasOptimizer when
    synchronous)."""
    if args.optimizer == "adagrad":
        return tf.compat.v1.train.AdagradOptimizer(args.lr)
    if args.optimizer == "ftrl":
        return tf.compat.v1.train.FtrlOptimizer(args.lr)
    if args.optimizer == "adam":
        return tf.compat.v1.train.AdamOptimizer(args.lr)
    if args.momentum:
        return tf.compat.v1.train.MomentumOptimizer(args.lr, args.momentum)
    return tf.compat.v1.train.GradientDescentOptimizer(args.lr)


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


def rounded(norms):
    """{name: norm} with 5 significant digits, for the result's JSON."""
    return {name: float(f"{float(value):.5g}") for name, value in norms.items()}


def max_diff(xs, ys):
    """The largest absolute difference between two lists of arrays."""
    import numpy as np

    return max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(xs, ys))


def max_rel_l2(xs, ys):
    """The largest ‖x − y‖₂ / ‖x‖₂ over two lists of arrays (tlcd's pull
    bound, `pull_max_drift`, is of this kind)."""
    import numpy as np

    worst = 0.0
    for a, b in zip(xs, ys):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        norm = float(np.linalg.norm(a))
        worst = max(worst, float(np.linalg.norm(a - b)) / norm if norm else float(np.linalg.norm(b)))
    return worst


def evaluate(sess, loss, accuracy, chunks):
    """Loss and accuracy over the test set, given as (feed dict, examples)
    chunks, averaged by examples; one chunk is one plain run."""
    def run(feed):
        return sess.run_step_fn(lambda step_context: step_context.session.run([loss, accuracy], feed_dict=feed))

    if len(chunks) == 1:
        return run(chunks[0][0])
    total = sum(n for _, n in chunks)
    sums = [0.0, 0.0]
    for feed, n in chunks:
        values = run(feed)
        sums = [s + float(v) * n for s, v in zip(sums, values)]
    return sums[0] / total, sums[1] / total


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


def session_watch(tf, args, global_step):
    """A session-run hook that records what a user would want to know after a
    fault: how many sessions MonitoredTrainingSession created (a rebuilt
    session follows a broken connection) and every time the global step went
    back (the chief re-initialised the model and training silently started
    again). It fetches the global step StopAtStepHook fetches anyway, so it
    adds nothing on the wire."""

    class SessionWatch(tf.compat.v1.train.SessionRunHook):
        def __init__(self):
            self.sessions = []  # the global step at each session's creation
            self.last = None
            self.regressions = []  # [from, to]

        def after_create_session(self, session, coord):
            step = int(session.run(global_step))
            self.sessions.append(step)
            if len(self.sessions) > 1:
                log(args, f"session {len(self.sessions)} created (a rebuilt one) at global step {step}")
            self.observe(step)

        def before_run(self, run_context):
            return tf.compat.v1.train.SessionRunArgs(global_step)

        def after_run(self, run_context, run_values):
            self.observe(int(run_values.results))

        def observe(self, step):
            if self.last is not None and step < self.last:
                self.regressions.append([self.last, step])
                what = "the model was re-initialised" if step == 0 else "a checkpoint was restored"
                log(args, f"GLOBAL STEP WENT BACK from {self.last} to {step}: {what}")
            self.last = step

    return SessionWatch()


def run_worker(tf, args, cluster, config):
    num_workers = len(args.worker_hosts)
    num_ps = len(args.ps_hosts)
    is_chief = args.task == 0
    server = tf.compat.v1.train.Server(cluster, job_name="worker", task_index=args.task, config=config)
    log(args, f"serving on {args.worker_hosts[args.task]}")
    data = load_workload_data(args, num_workers)
    sync = args.mode == "sync"

    worker_device = f"/job:worker/task:{args.task}"
    strategy = LeastLoadedPs(tf, num_ps)
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            ps_tasks=num_ps, worker_device=worker_device, ps_strategy=strategy)):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        work = build_workload(tf, args, data, num_ps)
        loss, accuracy = work.loss, work.accuracy
        base = make_optimizer(tf, args)
        if sync:
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
        else:
            # Asynchronous: each worker applies its own gradient to the
            # variables on the ps, and each application counts a global step.
            train_op = base.minimize(loss, global_step=global_step)
        if work.updates:
            # Batch norm's moving statistics, updated with every local step.
            train_op = tf.group(train_op, *work.updates)
    # The model as the ps holds it (fetched: RunGraph's response) and as
    # this worker receives it (copies: RecvTensor), for --check-final-read.
    model_vars, read_copies = [], []
    round_trip = None
    if args.check_final_read:
        # A copy on this worker: the ps sends each value with a RecvTensor
        # call, as an evaluation's reads do. Fetching the variable itself
        # returns it in RunGraph's response, which no sidecar changes.
        model_vars = tf.compat.v1.trainable_variables()
        with tf.compat.v1.device(worker_device):
            read_copies = [tf.identity(v) for v in model_vars]
        # Unsharded: the save and restore ops run on this worker, so every
        # value crosses to it to be saved, and back to be assigned.
        round_trip = tf.compat.v1.train.Saver(model_vars, sharded=False)
    # The L2 norm of every trained matrix or kernel, computed where the
    # variable lives (only a scalar crosses): with batch norm a kernel's
    # scale does not change the net's output, but its norm sets the step's
    # effective size, so a norm that grows faster through tlcd is a slower
    # effective learning rate.
    weight_norms = {}
    for v in tf.compat.v1.trainable_variables():
        if v.shape.ndims >= 2:
            with tf.compat.v1.colocate_with(v):
                weight_norms[v.op.name] = tf.norm(v)
    params = sum(int(v.shape.num_elements()) for v in tf.compat.v1.trainable_variables())
    placed = {}
    for v in tf.compat.v1.trainable_variables():
        where = placed.setdefault(v.device.replace("/job:", ""), [0, 0])
        where[0] += 1
        where[1] += int(v.shape.num_elements())
    log(args, f"model {args.model} ({args.mode}), {params} parameters: " + ", ".join(
        f"{n} tensors ({p} parameters) on {dev}" for dev, (n, p) in sorted(placed.items())))

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

    if is_chief and sync:
        quiet_cancelled_queue_runner(tf)
    watch = session_watch(tf, args, global_step)
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=args.steps), watch]
    if sync:
        hooks.insert(0, sync_hook)
    local_steps = 0
    result = None
    with tf.compat.v1.train.MonitoredTrainingSession(
            master=server.target, is_chief=is_chief, hooks=hooks, config=config,
            # At the end the chief's queue-runner thread is left waiting for
            # gradients of a step that never comes; TF would give it 120 s.
            stop_grace_period_secs=args.grace_secs,
            checkpoint_dir=args.checkpoint_dir,
            save_checkpoint_steps=args.save_checkpoint_steps if args.checkpoint_dir else None,
            save_checkpoint_secs=None, save_summaries_steps=None, save_summaries_secs=None,
            log_step_count_steps=None) as sess:
        if is_chief and init_signal is not None:
            sess.run_step_fn(raw(init_signal))
        if start_signal is not None:
            sess.run_step_fn(raw(start_signal))
        if start_wait is not None:
            sess.run_step_fn(raw(start_wait))
        log(args, "training")
        started = time.time()
        # Time spent in --eval-every evaluations, kept off the training clock.
        paused = 0.0
        curve = []
        while not sess.should_stop():
            if args.log_every and (local_steps + 1) % args.log_every == 0:
                _, batch_loss = sess.run([train_op, loss], feed_dict=next(work.train_feeds))
                log(args, f"local step {local_steps + 1}: loss {batch_loss:.4f}")
            else:
                sess.run(train_op, feed_dict=next(work.train_feeds))
            local_steps += 1
            if is_chief and args.eval_every and local_steps % args.eval_every == 0 and not sess.should_stop():
                point = {"local_step": local_steps, "train_seconds": round(time.time() - started - paused, 3)}
                eval_started = time.time()
                test_loss, acc = evaluate(sess, work.test_loss, work.test_accuracy, work.test_feeds)
                point["weight_norms"] = rounded(sess.run_step_fn(raw(weight_norms)))
                if read_copies:
                    # What an evaluator reads while training runs: exact
                    # with exact reads, else the replica within its bound.
                    model, read = sess.run_step_fn(raw((model_vars, read_copies)))
                    point["read_max_diff"] = max_diff(model, read)
                    point["read_max_rel_l2"] = max_rel_l2(model, read)
                paused += time.time() - eval_started
                point["test_accuracy"] = round(float(acc), 5)
                point["test_loss"] = round(float(test_loss), 5)
                curve.append(point)
                log(args, f"local step {local_steps}: test accuracy {acc:.4f} after "
                          f"{point['train_seconds']:.1f} s of training")
        seconds = time.time() - started - paused
        if sync:
            # A worker that read the global step just before the last update may
            # have started one more step and now waits for a sync token that will
            # never be handed out (the other worker has stopped). Spare tokens let
            # it return, see that training is over and stop.
            try:
                sess.run_step_fn(raw(release_tokens))
            except tf.errors.CancelledError:
                # The chief finished first and its session closed the token
                # queue (cancelling pending enqueues): nobody waits for a
                # token any more. Seen with and without sidecars, 2 of 8
                # runs on a loaded machine (2026-11-24).
                log(args, "token queue already closed by the chief: nothing to release")
        step = sess.run_step_fn(raw(global_step))
        result = {
            "job": "worker", "task": args.task, "chief": is_chief,
            "local_steps": local_steps, "global_step": int(step), "target_steps": args.steps,
            "seconds": round(seconds, 3),
            "step_seconds": round(seconds / local_steps, 5) if local_steps else None,
            "startup_seconds": round(started - PROCESS_START, 3),
            "params": params, "batch": args.batch, "lr": args.lr, "momentum": args.momentum,
            "optimizer": args.optimizer,
            "hidden": args.hidden if args.model == "mlp" else None, "grpc_compression": args.grpc_compression,
            "model": args.model, "mode": args.mode, "num_workers": num_workers, "num_ps": num_ps,
            "sessions": len(watch.sessions), "session_steps": watch.sessions,
            "global_step_regressions": watch.regressions,
        }
        result.update(work.info)
        if is_chief:
            test_loss, test_acc = evaluate(sess, work.test_loss, work.test_accuracy, work.test_feeds)
            result["test_loss"] = round(float(test_loss), 5)
            result["test_accuracy"] = round(float(test_acc), 5)
            result["weight_norms"] = rounded(sess.run_step_fn(raw(weight_norms)))
            if args.eval_every:
                curve.append({"local_step": local_steps, "train_seconds": round(seconds, 3),
                              "test_accuracy": result["test_accuracy"], "test_loss": result["test_loss"],
                              "weight_norms": result["weight_norms"]})
                result["curve"] = curve
            if read_copies:
                import tempfile

                if args.eval_every:
                    reads = [p for p in curve if "read_max_diff" in p]
                    result["eval_read_max_diff"] = max((p["read_max_diff"] for p in reads), default=0.0)
                    result["eval_read_max_rel_l2"] = max((p["read_max_rel_l2"] for p in reads), default=0.0)

                def save_and_restore(step_context):
                    # The ps's values before and after (RunGraph's response).
                    session = step_context.session
                    before = session.run(model_vars)
                    path = round_trip.save(session, os.path.join(tempfile.mkdtemp(), "model"),
                                           write_meta_graph=False)
                    round_trip.restore(session, path)
                    return before, session.run(model_vars)

                before, model = sess.run_step_fn(save_and_restore)
                result["restore_max_diff"] = max_diff(before, model)
                read = sess.run_step_fn(raw(read_copies))
                result["final_read_max_diff"] = max_diff(model, read)
        log(args, f"stopped after {local_steps} local steps, global step {step}, closing")

    if result is None:
        # MonitoredSession ended the block early and swallowed why (it does
        # for some errors while it closes a broken session).
        sys.exit(f"worker{args.task}: training ended after {local_steps} local steps without a result")
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
