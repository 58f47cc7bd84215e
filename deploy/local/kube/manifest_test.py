#!/usr/bin/env python3
"""Tests of manifest.py: what the runner makes of a TFJob, without running it.

    python3 deploy/local/kube/manifest_test.py
"""

import json
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import manifest  # noqa: E402

TFJOB = {
    "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
    "metadata": {"name": "mnist", "namespace": "ml"},
    "spec": {"tfReplicaSpecs": {
        "PS": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "tensorflow", "image": "tf", "ports": [{"name": "tfjob-port", "containerPort": 3333}]}]}}},
        "Worker": {"replicas": 2, "template": {
            "metadata": {"annotations": {"prometheus.io/scrape": "true"}},
            "spec": {
                "securityContext": {"runAsUser": 1000},
                "initContainers": [{
                    "name": "side", "image": "tlcd", "restartPolicy": "Always",
                    "ports": [{"name": "tlc-metrics", "containerPort": 17090}],
                    "startupProbe": {"httpGet": {"path": "/healthz", "port": "tlc-metrics"}, "periodSeconds": 1},
                    "resources": {"limits": {"memory": "1Gi"}},
                    "securityContext": {"runAsUser": 1337, "capabilities": {"drop": ["ALL"]}},
                }],
                "containers": [{"name": "tensorflow", "image": "tf"}]}}},
    }},
}
CONFIG_MAP = {"kind": "ConfigMap", "metadata": {"name": "tlc-config"}, "data": {"tlcd.toml": "x = 1\n"}}


class Job(unittest.TestCase):
    def setUp(self):
        self.job = manifest.job_from([TFJOB, CONFIG_MAP])

    def test_pods_are_named_as_the_operator_names_them(self):
        self.assertEqual([p.name for p in self.job.pods], ["mnist-ps-0", "mnist-worker-0", "mnist-worker-1"])
        self.assertEqual(self.job.pods[1].hostname, "mnist-worker-0.ml.svc")

    def test_tf_config_is_the_operators(self):
        env = self.job.pods[2].containers[0].env["TF_CONFIG"]
        self.assertEqual(json.loads(env), {
            # Each replica type's own tfjob-port (2222 when it names none).
            "cluster": {"ps": ["mnist-ps-0.ml.svc:3333"],
                        "worker": ["mnist-worker-0.ml.svc:2222", "mnist-worker-1.ml.svc:2222"]},
            "task": {"type": "worker", "index": 1}, "environment": "cloud"})
        self.assertNotIn(" ", env)  # Go's json.Marshal writes no spaces

    def test_sidecar_probe_user_and_limit(self):
        side = self.job.pods[1].init_containers[0]
        self.assertTrue(side.sidecar and side.init)
        self.assertEqual((side.startup.port, side.startup.path, side.startup.period), (17090, "/healthz", 1.0))
        self.assertEqual((side.run_as_user, side.memory_limit, side.cap_drop), (1337, 1 << 30, ["ALL"]))
        # The pod's securityContext is the default of the containers that set none.
        self.assertEqual(self.job.pods[1].containers[0].run_as_user, 1000)

    def test_operator_labels_and_config_maps(self):
        labels = self.job.pods[1].labels
        self.assertEqual(labels["training.kubeflow.org/replica-type"], "worker")
        self.assertEqual(labels["training.kubeflow.org/job-role"], "master")
        self.assertEqual(self.job.config_maps["tlc-config"], {"tlcd.toml": "x = 1\n"})
        self.assertEqual(self.job.clean_pod_policy, "Running")


class Refusals(unittest.TestCase):
    def test_what_the_runner_cannot_place_is_refused_by_name(self):
        chief = json.loads(json.dumps(TFJOB))
        chief["spec"]["tfReplicaSpecs"]["Chief"] = chief["spec"]["tfReplicaSpecs"]["PS"]
        with self.assertRaisesRegex(manifest.ManifestError, "Chief"):
            manifest.job_from([chief])
        with self.assertRaisesRegex(manifest.ManifestError, "exactly one TFJob"):
            manifest.job_from([CONFIG_MAP])

    def test_run_as_non_root_as_root_is_refused(self):
        bad = json.loads(json.dumps(TFJOB))
        bad["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["securityContext"] = {"runAsNonRoot": True}
        with self.assertRaisesRegex(manifest.ManifestError, "runAsNonRoot"):
            manifest.job_from([bad])

    def test_memory_quantities(self):
        self.assertEqual(manifest.memory_bytes("256Mi"), 256 << 20)
        self.assertEqual(manifest.memory_bytes("1G"), 10**9)
        self.assertIsNone(manifest.memory_bytes(None))
        with self.assertRaises(manifest.ManifestError):
            manifest.memory_bytes("lots")


if __name__ == "__main__":
    unittest.main()
