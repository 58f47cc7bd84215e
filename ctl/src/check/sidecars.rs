//! The tlc sidecars already running in the namespace: whether they are
//! ready, how often they restarted, and which images (versions) run.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::Value;

use super::{forbidden, list, Line, Verdict};

/// The sidecar's container name.
const SIDECAR: &str = "tlc-sidecar";

/// Why a container waits that will not pass by itself.
const BROKEN: [&str; 7] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// Pod names shown in a line before "and N more".
const SHOWN: usize = 3;

/// How one pod's sidecar is.
enum State {
    Ready,
    /// The pod is still being set up (pulling, mounting).
    Starting,
    /// Not ready, and why where the kubelet says.
    NotReady(Option<String>),
}

/// One live pod's sidecar.
struct Sidecar {
    pod: String,
    image: String,
    state: State,
    restarts: u64,
}

/// The health line and, when sidecars run, the versions line.
pub(super) fn check(namespace: &str) -> Result<Vec<Line>> {
    let pods = match list(namespace, "pods")? {
        Ok(pods) => pods,
        Err(message) => {
            let what = format!("the running sidecars in {namespace}");
            return Ok(vec![forbidden(&what, &message)]);
        }
    };
    let sidecars: Vec<Sidecar> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(sidecar)
        .collect();
    if sidecars.is_empty() {
        return Ok(vec![(
            Verdict::Ok,
            format!("no {SIDECAR} running in {namespace} yet"),
        )]);
    }
    Ok(vec![
        health(namespace, &sidecars),
        versions(namespace, &sidecars),
    ])
}

/// A pod's sidecar, if it has one and is live: a finished pod's sidecar
/// has stopped as it should, and a deleted pod's is going.
fn sidecar(pod: &Value) -> Option<Sidecar> {
    let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
    if matches!(phase, "Succeeded" | "Failed") || pod["metadata"]["deletionTimestamp"].is_string() {
        return None;
    }
    let spec = &pod["spec"];
    let container = ["initContainers", "containers"]
        .iter()
        .find_map(|key| spec[*key].as_array()?.iter().find(|c| c["name"] == SIDECAR))?;
    let status = find_status(&pod["status"]);
    let restarts = status["restartCount"].as_u64().unwrap_or(0);
    let waiting = status["state"]["waiting"]["reason"].as_str();
    let state = if status["ready"] == true {
        State::Ready
    } else if let Some(reason) = waiting.filter(|r| BROKEN.contains(r)) {
        State::NotReady(Some(reason.to_string()))
    } else if phase == "Pending" {
        State::Starting
    } else {
        let ended = status["state"]["terminated"]["reason"].as_str();
        State::NotReady(waiting.or(ended).map(str::to_string))
    };
    Some(Sidecar {
        pod: pod["metadata"]["name"].as_str().unwrap_or("?").to_string(),
        image: container["image"].as_str().unwrap_or("?").to_string(),
        state,
        restarts,
    })
}

/// The sidecar's status among the init containers' (a native sidecar) or
/// the containers'.
fn find_status(status: &Value) -> Value {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .find_map(|key| {
            status[*key]
                .as_array()?
                .iter()
                .find(|c| c["name"] == SIDECAR)
                .cloned()
        })
        .unwrap_or(Value::Null)
}

/// "a, b, c and 2 more".
fn some(names: &[String]) -> String {
    let mut shown = names[..names.len().min(SHOWN)].join(", ");
    if names.len() > SHOWN {
        shown.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    shown
}

/// Ready or not, and restarts: a sidecar not ready holds its pod's
/// TensorFlow traffic, so it fails; restarts of ready ones warn.
fn health(namespace: &str, sidecars: &[Sidecar]) -> Line {
    let ready = sidecars
        .iter()
        .filter(|s| matches!(s.state, State::Ready))
        .count();
    let mut not_ready = Vec::new();
    let mut starting = Vec::new();
    for s in sidecars {
        match &s.state {
            State::Ready => {}
            State::Starting => starting.push(s.pod.clone()),
            State::NotReady(Some(reason)) => not_ready.push(format!("{} ({reason})", s.pod)),
            State::NotReady(None) => not_ready.push(s.pod.clone()),
        }
    }
    let restarts: u64 = sidecars.iter().map(|s| s.restarts).sum();
    let restarted: Vec<String> = sidecars
        .iter()
        .filter(|s| s.restarts > 0)
        .map(|s| format!("{} ({} times)", s.pod, s.restarts))
        .collect();
    let mut line = format!(
        "{SIDECAR} in {namespace}: {ready} of {} ready, {restarts} restart(s)",
        sidecars.len()
    );
    if !not_ready.is_empty() {
        line.push_str(&format!("; not ready: {}", some(&not_ready)));
    }
    if !starting.is_empty() {
        line.push_str(&format!("; starting: {}", some(&starting)));
    }
    if restarts > 0 {
        line.push_str(&format!(
            "; restarted: {} (kubectl -n {namespace} logs POD -c {SIDECAR} --previous)",
            some(&restarted)
        ));
    }
    let verdict = if !not_ready.is_empty() {
        Verdict::Fail
    } else if !starting.is_empty() || restarts > 0 {
        Verdict::Warn
    } else {
        Verdict::Ok
    };
    (verdict, line)
}

/// The images the sidecars run: more than one is a warning, since one
/// job's sidecars talk to each other.
fn versions(namespace: &str, sidecars: &[Sidecar]) -> Line {
    let mut images: BTreeMap<&str, usize> = BTreeMap::new();
    for s in sidecars {
        *images.entry(s.image.as_str()).or_default() += 1;
    }
    let shown = images
        .iter()
        .map(|(image, n)| format!("{image} ({n} pod(s))"))
        .collect::<Vec<_>>()
        .join(", ");
    if images.len() == 1 {
        (
            Verdict::Ok,
            format!("{SIDECAR} image in {namespace}: {shown}"),
        )
    } else {
        (
            Verdict::Warn,
            format!(
                "{} {SIDECAR} images run in {namespace}: {shown}; a job's sidecars should run \
                 one version",
                images.len()
            ),
        )
    }
}
