//! Explicit mode (`inject --explicit`): tlc without iptables, so without a
//! privileged init container, for namespaces whose Pod Security level
//! refuses one. TFJobs only, whose cluster is known from the manifest.
//!
//! Instead of redirecting TensorFlow's connections, TensorFlow is told to
//! dial its own sidecar: the `tensorflow` container's command is wrapped in
//! a few lines of Python (every TensorFlow image has Python) that rewrite
//! `TF_CONFIG`, which the training operator sets, before starting the
//! program: every other task's address becomes a port of the local
//! sidecar, `127.0.0.1:17100 + k`, k counting the cluster's tasks in order
//! (jobs by name, then index). The sidecar gets the matching explicit
//! routes: `127.0.0.1:17100 + k` to that task's sidecar
//! (`NAME-JOB-I.NAMESPACE.svc:17016`, the operator's Service, looked up by
//! tlcd at each connection), and `:17016` to the local task. The task's own entry stays, so TensorFlow
//! listens where it always does.

use yaml_serde::{Mapping, Sequence, Value};

use super::error::{join, ManifestError};
use super::objects::TfJob;

/// Where a sidecar takes its peers' calls in explicit mode.
pub const INBOUND_PORT: u16 = 17016;

/// The local port of the cluster's first task; task k is at this + k.
pub const OUTBOUND_BASE: u16 = 17100;

/// The most tasks a cluster may have here (ports 17100 to 17899).
pub const MAX_TASKS: u64 = 800;

/// The wrapper: rewrites `TF_CONFIG` as the routes expect, then runs the
/// program (`python3 -c WRAPPER PROGRAM ARGS...`).
pub const WRAPPER: &str = r#"import json, os, sys
# tlc explicit mode: TensorFlow dials its own sidecar (tlcctl inject --explicit).
c = json.loads(os.environ['TF_CONFIG'])
me = c.get('task', {})
k = 0
for job in sorted(c['cluster']):
    tasks = c['cluster'][job]
    for i in range(len(tasks)):
        if not (job == me.get('type') and i == int(me.get('index', 0))):
            tasks[i] = '127.0.0.1:%d' % (17100 + k)
        k += 1
os.environ['TF_CONFIG'] = json.dumps(c)
os.execvp(sys.argv[1], sys.argv[1:])
"#;

/// The variable holding the pod's namespace (the downward API's
/// `metadata.namespace`), which the kubelet expands in the sidecar's
/// arguments: the Services are `NAME-JOB-I.NAMESPACE.svc`, as the training
/// operator writes them into `TF_CONFIG`.
pub const NAMESPACE_VAR: &str = "POD_NAMESPACE";

/// The sidecar's environment entry for [`NAMESPACE_VAR`].
pub fn namespace_env() -> Value {
    let mut field = Mapping::new();
    field.insert("fieldPath".into(), "metadata.namespace".into());
    let mut from = Mapping::new();
    from.insert("fieldRef".into(), Value::Mapping(field));
    let mut var = Mapping::new();
    var.insert("name".into(), NAMESPACE_VAR.into());
    var.insert("valueFrom".into(), Value::Mapping(from));
    Value::Mapping(var)
}

/// The interpreter the wrapper runs with.
const PYTHON: &str = "python3";

/// How many arguments the wrapper puts in front of a command.
pub const WRAPPER_ARGS: usize = 3;

/// The line that marks the wrapper, in this and earlier versions of it.
const WRAPPER_MARK: &str = "# tlc explicit mode:";

/// Whether `command` starts with explicit mode's wrapper (of this version
/// of tlcctl or an earlier one).
pub fn is_wrapped(command: &[Value]) -> bool {
    command.len() > WRAPPER_ARGS
        && command[0].as_str() == Some(PYTHON)
        && command[1].as_str() == Some("-c")
        && command[2]
            .as_str()
            .is_some_and(|w| w.contains(WRAPPER_MARK))
}

/// The sidecar's routes for a replica of `job` whose TensorFlow listens on
/// `tf_port`: `--route` arguments.
pub fn routes(job: &TfJob, tf_port: u16) -> Result<Vec<String>, String> {
    let tasks: u64 = job.cluster.iter().map(|(_, n)| n).sum();
    if tasks > MAX_TASKS {
        return Err(format!(
            "explicit mode takes at most {MAX_TASKS} tasks, this TFJob has {tasks}"
        ));
    }
    if job.name.is_empty() {
        return Err(
            "explicit mode needs the TFJob's metadata.name (its Services are named after it)"
                .into(),
        );
    }
    let mut routes = vec![format!(
        "0.0.0.0:{INBOUND_PORT}=127.0.0.1:{tf_port},inbound"
    )];
    let mut k = 0u16;
    for (role, replicas) in &job.cluster {
        for i in 0..*replicas {
            routes.push(format!(
                "127.0.0.1:{}={}-{role}-{i}.$({NAMESPACE_VAR}).svc:{INBOUND_PORT},outbound",
                OUTBOUND_BASE + k,
                job.name
            ));
            k += 1;
        }
    }
    Ok(routes)
}

/// The container whose command [`wrap_tensorflow`] wraps.
pub const WRAPPED_CONTAINER: &str = "tensorflow";

/// Wraps the command of the container named `tensorflow` in the pod spec
/// at `spec_path` (once: a wrapped command stays as it is).
pub fn wrap_tensorflow(spec: &mut Mapping, spec_path: &str) -> Result<(), ManifestError> {
    let path = join(spec_path, "containers");
    let Some(Value::Sequence(containers)) = spec.get_mut("containers") else {
        return Err(ManifestError::new(path, "no containers"));
    };
    let Some(container) = containers
        .iter_mut()
        .filter_map(Value::as_mapping_mut)
        .find(|c| c.get("name").and_then(Value::as_str) == Some(WRAPPED_CONTAINER))
    else {
        return Err(ManifestError::new(
            path,
            "explicit mode needs the container named tensorflow, whose TF_CONFIG the operator sets",
        ));
    };
    let command = match container.get("command") {
        Some(Value::Sequence(command)) if !command.is_empty() => command.clone(),
        _ => {
            return Err(ManifestError::new(
                join(&path, "tensorflow.command"),
                "explicit mode wraps the tensorflow container's command, and it has none (the \
                 image's entrypoint is not in the manifest): write it out",
            ))
        }
    };
    if !is_wrapped(&command) {
        let mut new: Sequence = vec![PYTHON.into(), "-c".into(), WRAPPER.into()];
        new.extend(command);
        container.insert("command".into(), Value::Sequence(new));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_cover_every_task_in_the_wrappers_order() {
        let job = TfJob {
            has_ps: true,
            name: "mnist".into(),
            cluster: vec![("ps".into(), 1), ("worker".into(), 2)],
        };
        assert_eq!(
            routes(&job, 2222).unwrap(),
            [
                "0.0.0.0:17016=127.0.0.1:2222,inbound",
                "127.0.0.1:17100=mnist-ps-0.$(POD_NAMESPACE).svc:17016,outbound",
                "127.0.0.1:17101=mnist-worker-0.$(POD_NAMESPACE).svc:17016,outbound",
                "127.0.0.1:17102=mnist-worker-1.$(POD_NAMESPACE).svc:17016,outbound",
            ]
        );
    }
}
