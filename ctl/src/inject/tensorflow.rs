//! Whether a pod template runs TensorFlow, and the ports its tasks talk
//! on: what `inject` reads from a manifest before it touches a pod.
//!
//! tlcd forwards what it does not understand untouched, but intercepting a
//! workload that is not a TensorFlow job only costs it, and intercepting
//! the wrong ports of one compresses nothing. So a pod is injected when
//! something in it says TensorFlow (a TFJob replica, a container named
//! `tensorflow`, a `TF_CONFIG` variable, the `--ps_hosts`/`--worker_hosts`
//! flags of a TF1 script, a port named `tfjob-port`), on the ports that
//! signal names: the cluster's in `TF_CONFIG`, the hosts' in the flags, the
//! `tfjob-port`, the `tensorflow` container's, or a TFJob's 2222.

use yaml_serde::{Mapping, Value};

use super::error::{index, join, ManifestError};

/// The port Kubeflow's training operator gives a TFJob's tasks when no
/// container port is named `tfjob-port`.
pub const TFJOB_DEFAULT_PORT: u16 = 2222;

/// The name the training operator looks for on a TFJob's port.
pub const TFJOB_PORT_NAME: &str = "tfjob-port";

/// The flags of TF1 scripts that list a job's tasks as `host:port,...`.
const HOST_FLAGS: [&str; 4] = [
    "--ps_hosts",
    "--worker_hosts",
    "--chief_hosts",
    "--master_hosts",
];

/// What says a pod runs TensorFlow, and the ports it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensorflow {
    /// The signal, as a phrase for messages ("TF_CONFIG in containers[0]").
    pub signal: String,
    /// The ports TensorFlow's tasks listen and dial on, never empty.
    pub ports: Vec<u16>,
}

/// Reads the pod spec at `spec_path`. `in_tf_job`: the template is a
/// TFJob replica's. `None`: nothing in it says TensorFlow.
pub fn inspect(
    spec: &Mapping,
    spec_path: &str,
    in_tf_job: bool,
) -> Result<Option<Tensorflow>, ManifestError> {
    let containers_path = join(spec_path, "containers");
    let containers = match spec.get("containers") {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::Sequence(containers)) => containers,
        Some(other) => return Err(ManifestError::expected(containers_path, "a list", other)),
    };
    let mut tf_config = None;
    let mut host_flags = None;
    let mut named_port = None;
    let mut tensorflow_container = None;
    for (i, container) in containers.iter().enumerate() {
        let path = index(&containers_path, i);
        let Value::Mapping(container) = container else {
            return Err(ManifestError::expected(path, "a mapping", container));
        };
        if tf_config.is_none() {
            if let Some(ports) = tf_config_ports(container, &path)? {
                tf_config = Some((format!("TF_CONFIG in {path}"), ports));
            }
        }
        if host_flags.is_none() {
            let ports = host_flag_ports(container);
            if !ports.is_empty() {
                host_flags = Some((format!("--ps_hosts/--worker_hosts in {path}"), ports));
            }
        }
        let ports = container_ports(container, &path)?;
        if named_port.is_none() {
            if let Some((port, _)) = ports.iter().find(|(_, name)| name == TFJOB_PORT_NAME) {
                named_port = Some((
                    format!("the port named {TFJOB_PORT_NAME} in {path}"),
                    vec![*port],
                ));
            }
        }
        if tensorflow_container.is_none()
            && container.get("name").and_then(Value::as_str) == Some("tensorflow")
        {
            let ports: Vec<u16> = ports.iter().map(|(p, _)| *p).collect();
            tensorflow_container =
                Some((format!("the container named tensorflow ({path})"), ports));
        }
    }
    let found = [tf_config, host_flags, named_port]
        .into_iter()
        .flatten()
        .find(|(_, ports)| !ports.is_empty());
    let found = match (found, in_tf_job, tensorflow_container) {
        (Some(found), _, _) => Some(found),
        // The operator's default: the TFJob's tasks on 2222, whatever else
        // the container exposes (TensorBoard, an exporter).
        (None, true, _) => Some(("a TFJob replica".to_string(), vec![TFJOB_DEFAULT_PORT])),
        (None, false, Some((signal, ports))) if !ports.is_empty() => Some((signal, ports)),
        (None, false, Some((signal, _))) => Some((signal, vec![TFJOB_DEFAULT_PORT])),
        (None, false, None) => None,
    };
    Ok(found.map(|(signal, mut ports)| {
        dedup(&mut ports);
        Tensorflow { signal, ports }
    }))
}

/// The ports of every task in a container's literal `TF_CONFIG`
/// (`{"cluster": {"ps": ["ps-0:2222"], ...}}`); `None` without one. A
/// `TF_CONFIG` taken from elsewhere (`valueFrom`) names no port here.
fn tf_config_ports(container: &Mapping, path: &str) -> Result<Option<Vec<u16>>, ManifestError> {
    let Some(Value::Sequence(env)) = container.get("env") else {
        return Ok(None);
    };
    for (i, var) in env.iter().enumerate() {
        if var.get("name").and_then(Value::as_str) != Some("TF_CONFIG") {
            continue;
        }
        let Some(text) = var.get("value").and_then(Value::as_str) else {
            return Ok(Some(Vec::new()));
        };
        let value_path = join(&index(&join(path, "env"), i), "value");
        let parsed: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            ManifestError::new(value_path.clone(), format!("TF_CONFIG is not JSON: {e}"))
        })?;
        let mut ports = Vec::new();
        if let Some(cluster) = parsed.get("cluster").and_then(serde_json::Value::as_object) {
            for tasks in cluster.values() {
                for address in tasks.as_array().into_iter().flatten() {
                    ports.extend(address.as_str().and_then(port_of));
                }
            }
        }
        return Ok(Some(ports));
    }
    Ok(None)
}

/// The ports in a container's `--ps_hosts=h:p,...`-style arguments
/// (`--flag=value` or `--flag value`, in `command` or `args`, also inside a
/// `sh -c` line).
fn host_flag_ports(container: &Mapping) -> Vec<u16> {
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|key| container.get(*key)?.as_sequence())
        .flatten()
        .filter_map(Value::as_str)
        .flat_map(str::split_whitespace)
        .collect();
    let mut ports = Vec::new();
    for (i, word) in words.iter().enumerate() {
        for flag in HOST_FLAGS {
            let value = match word.strip_prefix(flag) {
                Some(rest) if rest.starts_with('=') => Some(&rest[1..]),
                Some("") => words.get(i + 1).copied(),
                _ => None,
            };
            if let Some(value) = value {
                let value = value.trim_matches(|c| c == '"' || c == '\'');
                ports.extend(value.split(',').filter_map(port_of));
            }
        }
    }
    ports
}

/// The port of `host:port` (`[v6]:port` too).
fn port_of(address: &str) -> Option<u16> {
    let (_, port) = address.trim().rsplit_once(':')?;
    port.parse().ok().filter(|p| *p > 0)
}

/// The TCP `containerPort`s of one container, with their names.
pub fn container_ports(
    container: &Mapping,
    path: &str,
) -> Result<Vec<(u16, String)>, ManifestError> {
    let path = join(path, "ports");
    let ports = match container.get("ports") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Sequence(ports)) => ports,
        Some(other) => return Err(ManifestError::expected(path, "a list", other)),
    };
    let mut found = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let path = index(&path, i);
        let Value::Mapping(port) = port else {
            return Err(ManifestError::expected(path, "a mapping", port));
        };
        let protocol = port
            .get("protocol")
            .and_then(Value::as_str)
            .unwrap_or("TCP");
        if !protocol.eq_ignore_ascii_case("TCP") {
            continue;
        }
        let name = port.get("name").and_then(Value::as_str).unwrap_or("");
        let path = join(&path, "containerPort");
        let number = match port.get("containerPort") {
            Some(Value::Number(n)) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
            Some(Value::String(s)) => s.trim().parse::<u16>().ok(),
            Some(other) => return Err(ManifestError::expected(path, "a port number", other)),
            None => return Err(ManifestError::new(path, "missing")),
        };
        match number {
            Some(n) if n > 0 => found.push((n, name.to_string())),
            _ => return Err(ManifestError::new(path, "not a port number (1-65535)")),
        }
    }
    Ok(found)
}

/// The TCP ports the containers under `keys` (`containers`,
/// `initContainers`) of the pod spec at `spec_path` declare, in order,
/// those of a container `skip` takes left out.
pub fn declared_ports(
    spec: &Mapping,
    spec_path: &str,
    keys: &[&str],
    skip: impl Fn(&Mapping) -> bool,
) -> Result<Vec<u16>, ManifestError> {
    let mut ports = Vec::new();
    for key in keys {
        let path = join(spec_path, key);
        let Some(Value::Sequence(containers)) = spec.get(*key) else {
            continue;
        };
        for (i, container) in containers.iter().enumerate() {
            let Some(container) = container.as_mapping().filter(|c| !skip(c)) else {
                continue;
            };
            let found = container_ports(container, &index(&path, i))?;
            ports.extend(found.into_iter().map(|(port, _)| port));
        }
    }
    Ok(ports)
}

/// Removes repeats, keeping the first of each.
pub fn dedup(ports: &mut Vec<u16>) {
    let mut seen = Vec::new();
    ports.retain(|p| {
        let new = !seen.contains(p);
        seen.push(*p);
        new
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> Mapping {
        match yaml_serde::from_str::<Value>(yaml).unwrap() {
            Value::Mapping(m) => m,
            other => panic!("{other:?}"),
        }
    }

    fn ports(yaml: &str, in_tf_job: bool) -> Option<Vec<u16>> {
        inspect(&spec(yaml), "spec", in_tf_job)
            .unwrap()
            .map(|t| t.ports)
    }

    #[test]
    fn tf_config_names_the_cluster_ports() {
        let yaml = r#"
containers:
- name: main
  ports: [{containerPort: 6006}]
  env:
  - name: TF_CONFIG
    value: '{"cluster": {"ps": ["ps-0:5000"], "worker": ["w-0:5001", "[fd00::1]:5001"]}, "task": {"type": "ps", "index": 0}}'
"#;
        assert_eq!(ports(yaml, false), Some(vec![5000, 5001]));
        let bad = yaml.replace("{\"cluster\"", "{cluster");
        assert!(inspect(&spec(&bad), "spec", false).is_err());
    }

    #[test]
    fn host_flags_name_their_ports() {
        let yaml = r#"
containers:
- name: main
  command: [python, train.py, "--ps_hosts=tf-ps:2223", --worker_hosts, "tf-w-0:2224,tf-w-1:2224"]
  ports: [{containerPort: 8125}]
"#;
        assert_eq!(ports(yaml, false), Some(vec![2223, 2224]));
        let shell = r#"
containers:
- name: main
  command: [sh, -c]
  args: ["python train.py --job_name=ps --ps_hosts=tf-ps:2223 --worker_hosts=w:2225"]
"#;
        assert_eq!(ports(shell, false), Some(vec![2223, 2225]));
    }

    #[test]
    fn a_tfjob_uses_its_named_port_else_2222() {
        let named = r#"
containers:
- name: tensorflow
  ports: [{containerPort: 6006, name: tensorboard}, {containerPort: 2230, name: tfjob-port}]
"#;
        assert_eq!(ports(named, true), Some(vec![2230]));
        let unnamed = "containers:\n- name: tensorflow\n  ports: [{containerPort: 6006}]\n";
        assert_eq!(ports(unnamed, true), Some(vec![2222]));
    }

    #[test]
    fn a_tensorflow_container_outside_a_tfjob_gives_its_ports() {
        let yaml = "containers:\n- name: tensorflow\n  ports: [{containerPort: 2222}, {containerPort: 2223}]\n";
        assert_eq!(ports(yaml, false), Some(vec![2222, 2223]));
        let bare = "containers:\n- name: tensorflow\n";
        assert_eq!(ports(bare, false), Some(vec![2222]));
    }

    #[test]
    fn nothing_says_tensorflow_in_other_workloads() {
        for yaml in [
            "containers:\n- name: redis\n  image: redis:7\n  ports: [{containerPort: 6379}]\n",
            "containers:\n- name: serving\n  image: tensorflow/serving\n  ports: [{containerPort: 8500}]\n",
            "containers: []\n",
        ] {
            assert_eq!(ports(yaml, false), None, "{yaml}");
        }
    }
}
