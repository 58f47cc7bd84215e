//! Reaching every sidecar of a job in Kubernetes (`--selector`, with
//! `--namespace`), the way `linkerd viz stat` does: the pods `kubectl get
//! pods` lists that run a `tlc-sidecar` container, each reached through
//! its own `kubectl port-forward` to the admin port (which listens on the
//! pod's loopback only), with the token of the namespace's Secret
//! `tlc-admin-token`. Everything goes through the user's `kubectl`
//! ([`crate::kubectl`]).

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::target::{Target, DEFAULT_PORT};
use crate::kubectl;

/// The container tlcd runs in (the sidecar spec's name).
const SIDECAR: &str = "tlc-sidecar";

/// The Secret holding the admin token (`deploy/k8s`, `tlcctl inject`).
pub const TOKEN_SECRET: &str = "tlc-admin-token";

/// Which pods to reach.
#[derive(Debug, Clone)]
pub struct Selection {
    /// `--namespace`; `None`: kubectl's current one.
    pub namespace: Option<String>,
    /// `--selector`, a label selector (`training.kubeflow.org/job-name=mnist`).
    pub selector: String,
}

/// The sidecars found, the port-forwards that reach them (stopped when
/// this is dropped), and the namespace's admin token, if it has one.
pub struct Reached {
    /// One target per pod, labelled `NAMESPACE/POD`.
    pub targets: Vec<Target>,
    /// The token of the Secret `tlc-admin-token`.
    pub token: Option<String>,
    forwards: Vec<Child>,
}

impl Drop for Reached {
    fn drop(&mut self) {
        for child in &mut self.forwards {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One pod that runs a sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pod {
    namespace: String,
    name: String,
}

/// Finds the sidecars of `selection` and forwards a local port to each;
/// `want_token`: also read the Secret.
pub fn reach(selection: &Selection, want_token: bool, timeout: Duration) -> Result<Reached> {
    let pods = sidecar_pods(selection)?;
    let token = if want_token {
        secret_token(selection)?
    } else {
        None
    };
    let mut reached = Reached {
        targets: Vec::new(),
        token,
        forwards: Vec::new(),
    };
    for pod in pods {
        let label = format!("{}/{}", pod.namespace, pod.name);
        let (child, port) = port_forward(&pod, timeout)
            .with_context(|| format!("{label}: cannot forward a port to its sidecar"))?;
        reached.forwards.push(child);
        reached
            .targets
            .push(Target::forwarded(label, format!("127.0.0.1:{port}")));
    }
    Ok(reached)
}

/// The running pods of the selection with a `tlc-sidecar` container.
fn sidecar_pods(selection: &Selection) -> Result<Vec<Pod>> {
    let text = kubectl::output(
        selection.namespace.as_deref(),
        &["get", "pods", "-l", &selection.selector, "-o", "json"],
    )?;
    let list: Value = serde_json::from_str(&text).context("kubectl get pods: not JSON")?;
    let pods = parse_pods(&list);
    if pods.is_empty() {
        bail!(
            "no running pod with a {SIDECAR} container matches -l {}{}",
            selection.selector,
            selection
                .namespace
                .as_ref()
                .map_or(String::new(), |ns| format!(" in namespace {ns}"))
        );
    }
    Ok(pods)
}

/// The running pods of a `PodList` that have a `tlc-sidecar` container
/// (a native sidecar among the init containers, or a plain container).
fn parse_pods(list: &Value) -> Vec<Pod> {
    let mut pods = Vec::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let has_sidecar = ["initContainers", "containers"].iter().any(|key| {
            item["spec"][key]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["name"] == SIDECAR))
        });
        let running = item["status"]["phase"] == "Running";
        let (Some(name), Some(namespace)) = (
            item["metadata"]["name"].as_str(),
            item["metadata"]["namespace"].as_str(),
        ) else {
            continue;
        };
        if has_sidecar && running {
            pods.push(Pod {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
    }
    pods
}

/// The token in the Secret `tlc-admin-token`, if there is one.
fn secret_token(selection: &Selection) -> Result<Option<String>> {
    let text = kubectl::output(
        selection.namespace.as_deref(),
        &[
            "get",
            "secret",
            TOKEN_SECRET,
            "--ignore-not-found",
            "-o",
            "go-template={{.data.token | base64decode}}",
        ],
    )?;
    let token = text.trim().to_string();
    Ok((!token.is_empty()).then_some(token))
}

/// Starts `kubectl port-forward pod/NAME :ADMIN` and waits, at most
/// `timeout`, for the local port it prints ("Forwarding from
/// 127.0.0.1:PORT -> 17000").
fn port_forward(pod: &Pod, timeout: Duration) -> Result<(Child, u16)> {
    let mut child = kubectl::command()
        .args(["-n", &pod.namespace, "port-forward"])
        .arg(format!("pod/{}", pod.name))
        .arg(format!(":{DEFAULT_PORT}"))
        .args(["--address", "127.0.0.1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run kubectl port-forward")?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        bail!("kubectl port-forward: no output");
    };
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(port) = forwarded_port(&line) {
                let _ = sender.send(port);
                break;
            }
        }
    });
    match receiver.recv_timeout(timeout) {
        Ok(port) => Ok((child, port)),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("kubectl port-forward named no local port within {timeout:?}")
        }
    }
}

/// The local port of a `kubectl port-forward` line: `Forwarding from
/// 127.0.0.1:41235 -> 17000`.
fn forwarded_port(line: &str) -> Option<u16> {
    let rest = line.trim().strip_prefix("Forwarding from ")?;
    let (local, _) = rest.split_once(" -> ")?;
    local.rsplit_once(':')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_forwarded_port_is_read_from_kubectls_line() {
        assert_eq!(
            forwarded_port("Forwarding from 127.0.0.1:41235 -> 17000"),
            Some(41235)
        );
        assert_eq!(
            forwarded_port("Forwarding from [::1]:41236 -> 17000"),
            Some(41236)
        );
        assert_eq!(forwarded_port("Handling connection for 41235"), None);
    }

    #[test]
    fn only_running_pods_with_a_sidecar_are_reached() {
        let pod = |name: &str, phase: &str, key: &str, container: &str| {
            json!({
                "metadata": {"name": name, "namespace": "training"},
                "spec": {key: [{"name": container}]},
                "status": {"phase": phase},
            })
        };
        let list = json!({"items": [
            pod("ps-0", "Running", "initContainers", "tlc-sidecar"),
            pod("worker-0", "Running", "containers", "tlc-sidecar"),
            pod("worker-1", "Pending", "initContainers", "tlc-sidecar"),
            pod("tensorboard", "Running", "containers", "tensorboard"),
        ]});
        let names: Vec<String> = parse_pods(&list).into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["ps-0", "worker-0"]);
    }
}
