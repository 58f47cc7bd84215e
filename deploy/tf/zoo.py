#!/usr/bin/env python3
"""The model zoo: models tlc's defaults were never tuned on.

tlc's defaults were chosen on train.py's own models (mlp, embedding,
widedeep, resnet, bnconv). A user's model is none of them, so the question
that matters is how the defaults do on models nobody tuned them on. The zoo
answers it with models of the kinds users train through a parameter server
(dense nets, conv nets with and without batch norm, long-tail embedding
models, sparse multi-hot models; SGD, momentum, Adam and Adagrad, at
learning rates near the edge of stability) on data sets of their own.

It is split in two halves:

- tune: the models a change to tlc's compression may be judged and tuned on;
- heldout: the models it is reported on and never tuned on. A setting that
  only wins on the tune half is noise or overfitting, not a better default.

Each member is a train.py --model name with its own defaults (batch, rate,
optimizer) and its case (MODEL-MODE-<N>ps, as deploy/tf/models.sh takes it).
This file imports no TensorFlow at module level, so `zoo.py list` is quick:

    zoo.py list [--half tune|heldout]     names, one per line
    zoo.py cases [--half tune|heldout]    models.sh cases, comma-separated
    zoo.py show                           the table of members

train.py builds a member's graph with build(tf, args, data, num_ps) after
load(args, num_workers) made its data (deterministic, seed-independent:
every run and task sees the same examples).
"""

import sys
from dataclasses import dataclass, field

TUNE, HELDOUT = "tune", "heldout"


@dataclass(frozen=True)
class Member:
    """One zoo model: what it is, which half it belongs to, and the
    train.py defaults it runs with (the flags that default to None)."""

    name: str
    half: str
    kind: str  # dense, conv, resnetbn, zipfbag, multihot
    defaults: dict
    ps_tasks: int = 1
    about: str = ""
    options: dict = field(default_factory=dict)  # the builder's own parameters

    @property
    def case(self):
        return f"{self.name}-sync-{self.ps_tasks}ps"


MEMBERS = (
    # ---- tune half ----
    Member("densesgd", TUNE, "dense", {"batch": 64, "lr": 0.3, "momentum": 0.0, "optimizer": "momentum"},
           about="MLP 60-512-256-10 on tabular data, plain SGD",
           options={"data": "tab10", "hidden": (512, 256)}),
    Member("conv2", TUNE, "conv", {"batch": 32, "lr": 0.02, "momentum": 0.9, "optimizer": "momentum"},
           about="2 conv (5x5, 32/64, max pool) + 2 dense (256, 10) on glyph images, momentum",
           options={"data": "glyphs"}),
    Member("resnet8bn", TUNE, "resnetbn", {"batch": 32, "lr": 0.1, "momentum": 0.9, "optimizer": "momentum"},
           about="ResNet-8 with batch norm (1 block a stage, 16/32/64) on glyph images, momentum",
           options={"blocks": 1, "data": "glyphs"}),
    Member("mlpadam", TUNE, "dense", {"batch": 64, "lr": 0.003, "momentum": 0.0, "optimizer": "adam"},
           about="MLP 60-512-256-10 on densesgd's tabular data, Adam",
           options={"data": "tab10", "hidden": (512, 256)}),
    Member("zipfsmall", TUNE, "zipfbag", {"batch": 128, "lr": 0.5, "momentum": 0.9, "optimizer": "momentum"},
           about="bag of ids, Zipf(1) ids over 10^4 rows x 16, momentum, 1 ps",
           options={"vocab": 10_000, "dim": 16, "seed": 31}),
    # ---- held-out half: never tuned on ----
    Member("denseadam", HELDOUT, "dense", {"batch": 64, "lr": 0.003, "momentum": 0.0, "optimizer": "adam"},
           about="MLP 80-768-384-20 on other tabular data, Adam",
           options={"data": "tab20", "hidden": (768, 384)}),
    Member("resnet14bn", HELDOUT, "resnetbn", {"batch": 32, "lr": 0.05, "momentum": 0.9, "optimizer": "momentum"},
           about="ResNet-14 with batch norm (2 blocks a stage, 16/32/64) on grating images, momentum",
           options={"blocks": 2, "data": "gratings"}),
    Member("zipfbig", HELDOUT, "zipfbag", {"batch": 128, "lr": 0.5, "momentum": 0.0, "optimizer": "adagrad"},
           about="bag of ids, Zipf(1) ids over 10^6 rows x 16, Adagrad, table over 2 ps",
           ps_tasks=2, options={"vocab": 1_000_000, "dim": 16, "seed": 32}),
    Member("multihot", HELDOUT, "multihot", {"batch": 128, "lr": 0.1, "momentum": 0.0, "optimizer": "adagrad"},
           about="4 multi-hot Zipf fields (10^5..10^4 rows x 16), pairwise dot interactions + MLP, Adagrad",
           options={"vocabs": (100_000, 50_000, 20_000, 10_000), "dim": 16, "seed": 41}),
)
BY_NAME = {m.name: m for m in MEMBERS}

# ---- data: fixed seeds, independent of --seed ----

TEST_EXAMPLES = 4000
EVAL_CHUNK = 500


def tabular(spec):
    """Standardised sklearn make_classification data: tab10 (60 features,
    10 classes) or tab20 (80 features, 20 classes), with label noise so
    that no model reaches 100%."""
    import numpy as np
    from sklearn.datasets import make_classification

    features, classes, seed = {"tab10": (60, 10, 11), "tab20": (80, 20, 12)}[spec]
    x, y = make_classification(n_samples=16000 + TEST_EXAMPLES, n_features=features,
                               n_informative=features // 2, n_redundant=features // 6, n_classes=classes,
                               n_clusters_per_class=2, class_sep=1.2, flip_y=0.03, random_state=seed)
    x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
    return x[:-TEST_EXAMPLES], y[:-TEST_EXAMPLES].astype(np.int64), x[-TEST_EXAMPLES:], y[-TEST_EXAMPLES:].astype(np.int64)


def glyphs():
    """24x24 grey images of 10 classes: each class a fixed random 5x5 glyph,
    drawn 2x at a random place near the centre (+-4 pixels) and a random
    contrast, over noise and a fainter glyph of another class."""
    import numpy as np

    rng = np.random.default_rng(21)
    n = 12000 + TEST_EXAMPLES
    templates = (rng.random((10, 5, 5)) < 0.5).astype(np.float32)
    templates = np.kron(templates, np.ones((2, 2), np.float32))  # 10x10
    labels = rng.integers(0, 10, n)
    other = (labels + rng.integers(1, 10, n)) % 10
    x = 0.4 * rng.standard_normal((n, 24, 24), dtype=np.float32)
    for which, scale in ((labels, rng.uniform(0.7, 1.3, n)), (other, rng.uniform(0.1, 0.4, n))):
        at = rng.integers(3, 12, (n, 2))
        for i in range(n):
            r, c = at[i]
            x[i, r:r + 10, c:c + 10] += scale[i] * templates[which[i]]
    x = x[..., None]
    return x[:-TEST_EXAMPLES], labels[:-TEST_EXAMPLES], x[-TEST_EXAMPLES:], labels[-TEST_EXAMPLES:]


def grating_images(seed, train, test, freqs, angle_jitter, freq_jitter, noise):
    """32x32x3 images of 10 classes: a sinusoidal grating whose orientation
    (5 angles pi/5 apart) and spatial frequency (freqs[0] or freqs[1] cycles
    per image) give the class, with random phase, random colour (0.2-1 per
    channel), jitter of angle (radians) and frequency (relative), so that
    neighbouring classes overlap a little, and Gaussian pixel noise. Returns
    x_train, y_train, x_test, y_test."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = train + test
    labels = rng.integers(0, 10, n)
    theta = (labels % 5) * (np.pi / 5) + rng.normal(0.0, angle_jitter, n)
    freq = np.where(labels < 5, freqs[0], freqs[1]) * (1.0 + rng.normal(0.0, freq_jitter, n))
    phase = rng.uniform(0.0, 2 * np.pi, n)
    colour = rng.uniform(0.2, 1.0, (n, 3))
    grid = np.arange(32) / 32.0
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    u = np.cos(theta)[:, None, None] * xx + np.sin(theta)[:, None, None] * yy
    pattern = np.sin(2 * np.pi * freq[:, None, None] * u + phase[:, None, None]).astype(np.float32)
    x = pattern[..., None] * colour[:, None, None, :].astype(np.float32)
    x += noise * rng.standard_normal(x.shape, dtype=np.float32)
    labels = labels.astype(np.int64)
    return x[:train], labels[:train], x[train:], labels[train:]


def gratings():
    """The zoo's gratings: other frequencies, jitter, noise and seed than
    train.py's resnet images."""
    return grating_images(22, 10000, TEST_EXAMPLES, (2.5, 4.5), angle_jitter=0.12, freq_jitter=0.18, noise=0.7)


def zipf_ranks(rng, vocab, size):
    """Ranks 0..vocab-1 drawn with P(r) proportional to 1/(r+1): Zipf with
    exponent 1 and no offset, over the whole table (a long tail)."""
    import numpy as np

    cdf = np.cumsum(1.0 / np.arange(1, vocab + 1))
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(size)), vocab - 1)


def zipf_bags(vocab, seed):
    """Bags of 6-18 ids (Zipf(1) over the table, a fixed permutation of the
    ranks), 10 classes: every id has a hidden class affinity (2 for a class
    of its own, plus normal noise of 0.5: the tail carries signal too); the
    label is the argmax of the bag's summed affinities plus Gumbel noise.
    Returns (ids, labels) for train and test, ids a list of int64 arrays."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = 30000 + TEST_EXAMPLES
    token_of_rank = rng.permutation(vocab).astype(np.int64)
    own = np.eye(10, dtype=np.float32)[rng.integers(0, 10, vocab)]
    affinity = 2.0 * own + 0.5 * rng.standard_normal((vocab, 10), dtype=np.float32)
    lengths = rng.integers(6, 19, n)
    ranks = zipf_ranks(rng, vocab, int(lengths.sum()))
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    scores = np.add.reduceat(affinity[ranks], bounds[:-1], axis=0) / np.sqrt(lengths)[:, None]
    labels = np.argmax(scores + rng.gumbel(0.0, 0.3, scores.shape), 1).astype(np.int64)
    ids = np.split(token_of_rank[ranks], bounds[1:-1])
    return ids[:-TEST_EXAMPLES], labels[:-TEST_EXAMPLES], ids[-TEST_EXAMPLES:], labels[-TEST_EXAMPLES:]


def multihot_fields(vocabs, seed):
    """Click-like examples over multi-hot fields: 1-5 Zipf(1) ids per field
    and example; every id has a hidden effect and a 4-d hidden vector; the
    score sums the fields' mean effects and the dot products of every pair
    of fields' mean vectors; label 1 above the median of score plus logistic
    noise. Returns per field an int64 array [examples, 5] padded with -1,
    and the labels, for train and test."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = 40000 + TEST_EXAMPLES
    score = np.zeros(n)
    fields, hidden = [], []
    for vocab in vocabs:
        token_of_rank = rng.permutation(vocab).astype(np.int64)
        lengths = rng.integers(1, 6, n)
        mask = np.arange(5)[None, :] < lengths[:, None]
        ranks = np.zeros((n, 5), np.int64)
        ranks[mask] = zipf_ranks(rng, vocab, int(lengths.sum()))
        effect = rng.standard_normal(vocab)
        vectors = rng.standard_normal((vocab, 4))
        score += np.where(mask, effect[ranks], 0.0).sum(1) / lengths
        hidden.append(np.where(mask[..., None], vectors[ranks], 0.0).sum(1) / lengths[:, None])
        fields.append(np.where(mask, token_of_rank[ranks], -1))
    for a in range(len(hidden)):
        for b in range(a + 1, len(hidden)):
            score += 0.5 * (hidden[a] * hidden[b]).sum(1)
    labels = (score + rng.logistic(0.0, 0.4, n) > np.median(score)).astype(np.int64)
    return ([f[:-TEST_EXAMPLES] for f in fields], labels[:-TEST_EXAMPLES],
            [f[-TEST_EXAMPLES:] for f in fields], labels[-TEST_EXAMPLES:])


def load(args, num_workers):
    """The member's data; a worker keeps its own disjoint shard of the
    training examples."""
    m = BY_NAME[args.model]
    o = m.options
    if m.kind == "zipfbag":
        data = zipf_bags(o["vocab"], o["seed"])
    elif m.kind == "multihot":
        data = multihot_fields(o["vocabs"], o["seed"])
    elif o["data"] == "glyphs":
        data = glyphs()
    elif o["data"] == "gratings":
        data = gratings()
    else:
        data = tabular(o["data"])
    train_x, train_y, test_x, test_y = data
    if args.job == "worker":
        if m.kind == "multihot":
            train_x = [f[args.task::num_workers] for f in train_x]
        else:
            train_x = train_x[args.task::num_workers]
        train_y = train_y[args.task::num_workers]
    return train_x, train_y, test_x, test_y


def shuffled(n, batch, seed):
    """Endless shuffled epochs of index batches over n examples."""
    import numpy as np

    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(n)
        for start in range(0, n - batch + 1, batch):
            yield order[start:start + batch]


def multi_hot_feed(placeholders, fields, labels, idx):
    """A feed dict of examples idx over multi-hot fields (per field an int64
    array [examples, ids] padded with -1): one SparseTensorValue of ids per
    field's placeholder, then the labels' (the last placeholder)."""
    import numpy as np

    *sparse, y = placeholders
    feed = {y: labels[idx]}
    for ph, ids in zip(sparse, fields):
        rows = ids[idx]
        present = rows >= 0
        feed[ph] = (np.argwhere(present).astype(np.int64), rows[present], np.array(rows.shape, np.int64))
    return feed


def chunks(n):
    return [range(i, min(i + EVAL_CHUNK, n)) for i in range(0, n, EVAL_CHUNK)]


# ---- graphs ----


def classify(tf, logits, y):
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
    return loss, accuracy


def dense_layer(tf, h, name, width, seed, relu=True):
    fan_in = int(h.shape[-1])
    w = tf.compat.v1.get_variable(f"{name}/kernel", [fan_in, width], tf.float32,
                                  tf.compat.v1.glorot_uniform_initializer(seed=seed))
    b = tf.compat.v1.get_variable(f"{name}/bias", [width], tf.float32, tf.compat.v1.zeros_initializer())
    h = tf.matmul(h, w) + b
    return tf.nn.relu(h) if relu else h


def build_dense(tf, args, m, data):
    x_train, y_train, x_test, y_test = data
    x = tf.compat.v1.placeholder(tf.float32, [None, x_train.shape[1]], name="x")
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
    h = x
    for i, width in enumerate(m.options["hidden"]):
        h = dense_layer(tf, h, f"dense{i}", width, args.seed + i)
    classes = int(max(y_test.max(), y_train.max())) + 1
    loss, accuracy = classify(tf, dense_layer(tf, h, "logits", classes, args.seed + 10, relu=False), y)
    return image_like(x, y, data, args, loss, accuracy)


def image_like(x, y, data, args, loss, accuracy, updates=(), test=None):
    """Workload pieces for models fed an array x and labels y."""
    x_train, y_train, x_test, y_test = data
    seed = args.seed * 1000 + args.task
    train = ({x: x_train[i], y: y_train[i]} for i in shuffled(len(y_train), args.batch, seed))
    tests = [({x: x_test[i], y: y_test[i]}, len(i)) for i in chunks(len(y_test))]
    return dict(loss=loss, accuracy=accuracy, train_feeds=train, test_feeds=tests, info={},
                updates=updates, test=test)


def build_conv(tf, args, m, data):
    x = tf.compat.v1.placeholder(tf.float32, [None, *data[0].shape[1:]], name="x")
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
    h = x
    for i, width in enumerate((32, 64)):
        fan_in = int(h.shape[-1])
        k = tf.compat.v1.get_variable(
            f"conv{i}/kernel", [5, 5, fan_in, width], tf.float32,
            tf.compat.v1.variance_scaling_initializer(scale=2.0, mode="fan_in", seed=args.seed + i))
        b = tf.compat.v1.get_variable(f"conv{i}/bias", [width], tf.float32, tf.compat.v1.zeros_initializer())
        h = tf.nn.relu(tf.nn.conv2d(h, k, [1, 1, 1, 1], "SAME") + b)
        h = tf.nn.max_pool2d(h, 2, 2, "SAME")
    h = tf.reshape(h, [-1, int(h.shape[1]) * int(h.shape[2]) * int(h.shape[3])])
    h = dense_layer(tf, h, "dense0", 256, args.seed + 5)
    loss, accuracy = classify(tf, dense_layer(tf, h, "logits", 10, args.seed + 6, relu=False), y)
    return image_like(x, y, data, args, loss, accuracy)


BN_DECAY = 0.9
BN_EPSILON = 1e-3


def batch_norm(tf, h, training, updates, decay, epsilon):
    """Batch norm over a conv's output, built by hand (Keras 3 took
    tf.compat.v1.layers.batch_normalization away): gamma and beta trained;
    the moving mean and variance non-trainable variables (on the ps under
    a device setter). Training normalises by the batch's moments and
    appends to `updates` the AssignSub ops that move the statistics toward
    them (what moving_averages.assign_moving_average does:
    v -= (v - x) * (1 - decay)); inference normalises by the statistics."""
    channels = int(h.shape[-1])
    gamma = tf.compat.v1.get_variable("gamma", [channels], tf.float32, tf.compat.v1.ones_initializer())
    beta = tf.compat.v1.get_variable("beta", [channels], tf.float32, tf.compat.v1.zeros_initializer())
    moving_mean = tf.compat.v1.get_variable(
        "moving_mean", [channels], tf.float32, tf.compat.v1.zeros_initializer(), trainable=False)
    moving_var = tf.compat.v1.get_variable(
        "moving_variance", [channels], tf.float32, tf.compat.v1.ones_initializer(), trainable=False)
    if training:
        mean, var = tf.nn.moments(h, [0, 1, 2])
        updates.append(tf.compat.v1.assign_sub(moving_mean, (moving_mean - mean) * (1.0 - decay)))
        updates.append(tf.compat.v1.assign_sub(moving_var, (moving_var - var) * (1.0 - decay)))
    else:
        mean, var = moving_mean, moving_var
    return tf.nn.batch_normalization(h, mean, var, beta, gamma, epsilon)


def build_resnetbn(tf, args, m, data):
    """A CIFAR-style ResNet (He et al. 2016) with batch norm after every
    conv, built by hand as train.py's bnconv is: gamma and beta trained, the
    moving mean and variance non-trainable variables on the ps moved by
    AssignSub with every step, the net built twice over the same variables
    (batch moments for training, moving statistics for the test)."""
    x = tf.compat.v1.placeholder(tf.float32, [None, *data[0].shape[1:]], name="x")
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
    updates = []

    def bn(h, training):
        return batch_norm(tf, h, training, updates, BN_DECAY, BN_EPSILON)

    def net(training):
        seeds = iter(range(args.seed, args.seed + 1000))

        def conv_bn(h, name, size, width, stride):
            with tf.compat.v1.variable_scope(name):
                k = tf.compat.v1.get_variable(
                    "kernel", [size, size, int(h.shape[-1]), width], tf.float32,
                    tf.compat.v1.variance_scaling_initializer(scale=2.0, mode="fan_in",
                                                              distribution="truncated_normal", seed=next(seeds)))
                return bn(tf.nn.conv2d(h, k, [1, stride, stride, 1], "SAME"), training)

        with tf.compat.v1.variable_scope("resnetbn", reuse=tf.compat.v1.AUTO_REUSE):
            h = tf.nn.relu(conv_bn(x, "stem", 3, 16, 1))
            for stage, width in enumerate((16, 32, 64)):
                for block in range(m.options["blocks"]):
                    name = f"stage{stage + 1}/block{block + 1}"
                    stride = 2 if stage > 0 and block == 0 else 1
                    r = tf.nn.relu(conv_bn(h, f"{name}/conv1", 3, width, stride))
                    r = conv_bn(r, f"{name}/conv2", 3, width, 1)
                    short = h if stride == 1 else conv_bn(h, f"{name}/shortcut", 1, width, stride)
                    h = tf.nn.relu(r + short)
            h = tf.reduce_mean(h, [1, 2])
            logits = dense_layer(tf, h, "logits", 10, next(seeds), relu=False)
        return classify(tf, logits, y)

    loss, accuracy = net(training=True)
    test = net(training=False)
    return image_like(x, y, data, args, loss, accuracy, updates=updates, test=test)


def bag(ids, labels, idx):
    """Bags idx as a batch: their ids flat, the example each id belongs to
    (segment ids), and their labels."""
    import numpy as np

    flat = np.concatenate([ids[i] for i in idx])
    segments = np.repeat(np.arange(len(idx), dtype=np.int32), [len(ids[i]) for i in idx])
    return flat, segments, labels[idx]


def build_zipfbag(tf, args, m, data, num_ps):
    """sum(table[ids]) / sqrt(len) per bag -> a 16 x 64 ReLU layer -> 10
    classes; the table is split over the ps tasks (fixed_size_partitioner)."""
    x_train, y_train, x_test, y_test = data
    ids = tf.compat.v1.placeholder(tf.int64, [None], name="ids")
    segments = tf.compat.v1.placeholder(tf.int32, [None], name="segments")
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
    table = tf.compat.v1.get_variable(
        "table", [m.options["vocab"], m.options["dim"]], tf.float32,
        tf.compat.v1.random_normal_initializer(stddev=0.05, seed=args.seed),
        partitioner=tf.compat.v1.fixed_size_partitioner(num_ps) if num_ps > 1 else None)
    rows = tf.compat.v1.nn.embedding_lookup(table, ids, partition_strategy="div")
    h = tf.math.segment_sum(rows, segments)
    h = h / tf.sqrt(tf.cast(tf.math.segment_sum(tf.ones_like(segments), segments), tf.float32))[:, None]
    h = dense_layer(tf, h, "dense0", 64, args.seed + 1)
    loss, accuracy = classify(tf, dense_layer(tf, h, "logits", 10, args.seed + 2, relu=False), y)
    seed = args.seed * 1000 + args.task

    def feed(b):
        i, s, yb = b
        return {ids: i, segments: s, y: yb}

    train = (feed(bag(x_train, y_train, i)) for i in shuffled(len(y_train), args.batch, seed))
    tests = [(feed(bag(x_test, y_test, i)), len(i)) for i in chunks(len(y_test))]
    return dict(loss=loss, accuracy=accuracy, train_feeds=train, test_feeds=tests,
                info={"vocab": m.options["vocab"], "partitions": num_ps})


def build_multihot(tf, args, m, data, num_ps):
    """Per field a [vocab, 16] table (embedding_lookup_sparse, mean) split
    over the ps tasks; the pairwise dot products of the fields' vectors and
    the vectors themselves -> a ReLU MLP (64, 32) -> one logit."""
    import numpy as np

    fields_train, y_train, fields_test, y_test = data
    vocabs, dim = m.options["vocabs"], m.options["dim"]
    sparse = [tf.compat.v1.sparse_placeholder(tf.int64, [None, 5], name=f"field{f}") for f in range(len(vocabs))]
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
    partitioner = tf.compat.v1.fixed_size_partitioner(num_ps) if num_ps > 1 else None
    vecs = []
    for f, (ph, vocab) in enumerate(zip(sparse, vocabs)):
        table = tf.compat.v1.get_variable(
            f"field{f}", [vocab, dim], tf.float32,
            tf.compat.v1.random_normal_initializer(stddev=0.05, seed=args.seed + f), partitioner=partitioner)
        vecs.append(tf.compat.v1.nn.embedding_lookup_sparse(table, ph, None, partition_strategy="div",
                                                            combiner="mean"))
    dots = [tf.reduce_sum(vecs[a] * vecs[b], 1, keepdims=True)
            for a in range(len(vecs)) for b in range(a + 1, len(vecs))]
    h = tf.concat(vecs + dots, 1)
    h = dense_layer(tf, h, "dense0", 64, args.seed + 10)
    h = dense_layer(tf, h, "dense1", 32, args.seed + 11)
    logit = tf.squeeze(dense_layer(tf, h, "logit", 1, args.seed + 12, relu=False), 1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(y, tf.float32), logits=logit))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.cast(logit > 0, tf.int64), y), tf.float32))

    def feed(fields, labels, idx):
        return multi_hot_feed((*sparse, y), fields, labels, idx)

    seed = args.seed * 1000 + args.task
    train = (feed(fields_train, y_train, i) for i in shuffled(len(y_train), args.batch, seed))
    tests = [(feed(fields_test, y_test, np.asarray(i)), len(i)) for i in chunks(len(y_test))]
    return dict(loss=loss, accuracy=accuracy, train_feeds=train, test_feeds=tests,
                info={"vocab": list(vocabs), "partitions": num_ps})


def build(tf, args, data, num_ps):
    """The member's graph (under the caller's device setter), as the keyword
    arguments of train.py's Workload."""
    m = BY_NAME[args.model]
    tf.compat.v1.set_random_seed(args.seed)
    if m.kind == "dense":
        return build_dense(tf, args, m, data)
    if m.kind == "conv":
        return build_conv(tf, args, m, data)
    if m.kind == "resnetbn":
        return build_resnetbn(tf, args, m, data)
    if m.kind == "zipfbag":
        return build_zipfbag(tf, args, m, data, num_ps)
    return build_multihot(tf, args, m, data, num_ps)


def main(argv):
    import argparse

    p = argparse.ArgumentParser(description="The model zoo: list its members and cases.")
    p.add_argument("what", choices=["list", "cases", "show"])
    p.add_argument("--half", choices=[TUNE, HELDOUT])
    a = p.parse_args(argv)
    members = [m for m in MEMBERS if a.half in (None, m.half)]
    if a.what == "list":
        print("\n".join(m.name for m in members))
    elif a.what == "cases":
        print(",".join(m.case for m in members))
    else:
        print("| model | half | case | optimizer, rate | what |\n|---|---|---|---|---|")
        for m in members:
            d = m.defaults
            optimizer = d["optimizer"] if d["optimizer"] != "momentum" else (
                f"momentum {d['momentum']}" if d["momentum"] else "sgd")
            print(f"| {m.name} | {m.half} | {m.case} | {optimizer}, {d['lr']} | {m.about} |")


if __name__ == "__main__":
    main(sys.argv[1:])
