//! The sidecar spec: `deploy/k8s/components/sidecar/sidecar.yaml`, the one
//! file both `tlcctl inject` and the Kustomize overlays take tlc's init
//! container, sidecar container, volumes, pod annotations and grace period
//! from. Built into tlcctl and parsed once; this module reads it and names
//! tlc's pieces; the `sidecar` module puts one pod's settings on top.

use std::sync::LazyLock;

use anyhow::{anyhow, Result};
use yaml_serde::{Mapping, Value};

use super::error::{index, join, ManifestError};
use super::mapping::name_of;

/// Where the spec is, from the top of the repository.
pub const PATH: &str = "deploy/k8s/components/sidecar/sidecar.yaml";

/// The spec's text. Included from outside the package: `tlc-ctl` is not
/// published (it depends on `tlc-codec` by path alone), it is only built
/// from this repository, where the path resolves from any directory `cargo`
/// runs in. `config.rs` includes `deploy/k8s/base/tlcd.toml` the same way.
pub const TEXT: &str = include_str!("../../../deploy/k8s/components/sidecar/sidecar.yaml");

/// The init container that installs the iptables rules.
pub const INIT_NAME: &str = "tlc-init";
/// The native sidecar running tlcd.
pub const SIDECAR_NAME: &str = "tlc-sidecar";
/// The volume with the mutual TLS certificates, mounted with `--mtls` only.
pub const TLS_VOLUME: &str = "tlc-tls";
/// The `tlc-init` argument followed by the TensorFlow ports to redirect.
pub const TF_PORTS_FLAG: &str = "--tf-ports";

/// The spec, checked: what every injected pod gets before its own settings.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The pod template's annotations, in the spec's order.
    pub annotations: Mapping,
    /// The pod template's labels (Istio's opt-outs), in the spec's order.
    pub labels: Mapping,
    /// The least `terminationGracePeriodSeconds` of an injected pod.
    pub grace_seconds: u64,
    /// `tlc-init`, as the spec has it.
    pub init: Mapping,
    /// The index in `tlc-init`'s `command` of the TensorFlow ports (the
    /// argument after [`TF_PORTS_FLAG`]).
    pub tf_ports_at: usize,
    /// `tlc-sidecar`, as the spec has it.
    pub sidecar: Mapping,
    /// The volumes, in the spec's order, [`TLS_VOLUME`] among them.
    pub volumes: Vec<Value>,
    /// The image of both containers: the default of `--image`.
    pub image: String,
}

/// The built-in spec, parsed at first use.
static SPEC: LazyLock<Result<Spec, ManifestError>> = LazyLock::new(|| parse(TEXT));

/// The built-in spec, or why it is unusable (a bug in this build of tlcctl).
pub fn get() -> Result<&'static Spec> {
    SPEC.as_ref()
        .map_err(|e| anyhow!("the sidecar spec built into tlcctl ({PATH}): {e} (a bug in tlcctl)"))
}

/// The spec's image, for `--image`'s default; empty if the spec is unusable
/// ([`get`] then says why before the flag is used).
pub fn default_image() -> &'static str {
    SPEC.as_ref().map_or("", |spec| spec.image.as_str())
}

/// Reads and checks a spec: a `PodTemplate` whose `template` holds the
/// annotations, the grace period, exactly `tlc-init` then `tlc-sidecar` in
/// `initContainers`, and the volumes, the TLS one mounted by the sidecar.
pub fn parse(text: &str) -> Result<Spec, ManifestError> {
    let top: Value = yaml_serde::from_str(text)
        .map_err(|e| ManifestError::new("", format!("not valid YAML: {e}")))?;
    let Value::Mapping(top) = top else {
        return Err(ManifestError::expected(
            "",
            "a PodTemplate (a mapping)",
            &top,
        ));
    };
    let template = mapping(&top, "", "template")?;
    let metadata = mapping(template, "template", "metadata")?;
    let annotations = mapping(metadata, "template.metadata", "annotations")?.clone();
    let labels = mapping(metadata, "template.metadata", "labels")?.clone();
    for (which, map) in [("annotations", &annotations), ("labels", &labels)] {
        for (key, value) in map {
            if !(key.is_string() && value.is_string()) {
                let path = join(
                    &join("template.metadata", which),
                    key.as_str().unwrap_or("?"),
                );
                return Err(ManifestError::new(path, format!("{which} are strings")));
            }
        }
    }
    let spec = mapping(template, "template", "spec")?;
    let grace_path = "template.spec.terminationGracePeriodSeconds";
    let grace_seconds = match spec.get("terminationGracePeriodSeconds") {
        Some(Value::Number(n)) => n.as_u64(),
        _ => None,
    }
    .ok_or_else(|| ManifestError::new(grace_path, "missing or not a whole number of seconds"))?;

    let inits_path = "template.spec.initContainers";
    let inits = sequence(spec, "template.spec", "initContainers")?;
    let names: Vec<_> = inits.iter().map(name_of).collect();
    if names != [Some(INIT_NAME), Some(SIDECAR_NAME)] {
        return Err(ManifestError::new(
            inits_path,
            format!("expected {INIT_NAME} then {SIDECAR_NAME}, found {names:?}"),
        ));
    }
    let init = container(&inits[0], &index(inits_path, 0))?;
    let sidecar = container(&inits[1], &index(inits_path, 1))?;
    let image = init.get("image").and_then(Value::as_str).unwrap_or("");
    if image.is_empty() || sidecar.get("image").and_then(Value::as_str) != Some(image) {
        return Err(ManifestError::new(
            inits_path,
            "both containers need the same image, the default of --image",
        ));
    }
    let tf_ports_at = tf_ports_at(init, &index(inits_path, 0))?;

    let volumes = sequence(spec, "template.spec", "volumes")?.clone();
    if !volumes.iter().any(|v| name_of(v) == Some(TLS_VOLUME)) {
        return Err(ManifestError::new(
            "template.spec.volumes",
            format!("no volume {TLS_VOLUME}"),
        ));
    }
    let mounts_path = join(&index(inits_path, 1), "volumeMounts");
    if !sequence(sidecar, &index(inits_path, 1), "volumeMounts")?
        .iter()
        .any(|m| name_of(m) == Some(TLS_VOLUME))
    {
        return Err(ManifestError::new(
            mounts_path,
            format!("{SIDECAR_NAME} does not mount {TLS_VOLUME}"),
        ));
    }
    Ok(Spec {
        annotations,
        labels,
        grace_seconds,
        image: image.to_string(),
        init: init.clone(),
        tf_ports_at,
        sidecar: sidecar.clone(),
        volumes,
    })
}

/// The mapping at `key` of `map` (which is at `path`).
fn mapping<'a>(map: &'a Mapping, path: &str, key: &str) -> Result<&'a Mapping, ManifestError> {
    match map.get(key) {
        Some(Value::Mapping(inner)) => Ok(inner),
        Some(other) => Err(ManifestError::expected(join(path, key), "a mapping", other)),
        None => Err(ManifestError::new(join(path, key), "missing")),
    }
}

/// The list at `key` of `map` (which is at `path`).
fn sequence<'a>(map: &'a Mapping, path: &str, key: &str) -> Result<&'a Vec<Value>, ManifestError> {
    match map.get(key) {
        Some(Value::Sequence(list)) => Ok(list),
        Some(other) => Err(ManifestError::expected(join(path, key), "a list", other)),
        None => Err(ManifestError::new(join(path, key), "missing")),
    }
}

/// A container, which must be a mapping.
fn container<'a>(value: &'a Value, path: &str) -> Result<&'a Mapping, ManifestError> {
    match value {
        Value::Mapping(container) => Ok(container),
        other => Err(ManifestError::expected(path, "a mapping", other)),
    }
}

/// Where the ports are in `tlc-init`'s command: right after [`TF_PORTS_FLAG`].
fn tf_ports_at(init: &Mapping, path: &str) -> Result<usize, ManifestError> {
    let path = join(path, "command");
    let command = match init.get("command") {
        Some(Value::Sequence(command)) => command,
        Some(other) => return Err(ManifestError::expected(path, "a list", other)),
        None => return Err(ManifestError::new(path, "missing")),
    };
    match command
        .iter()
        .position(|a| a.as_str() == Some(TF_PORTS_FLAG))
    {
        Some(at) if command.get(at + 1).is_some_and(Value::is_string) => Ok(at + 1),
        _ => Err(ManifestError::new(
            path,
            format!("no {TF_PORTS_FLAG} followed by the ports"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built_in() -> &'static Spec {
        match get() {
            Ok(spec) => spec,
            Err(e) => panic!("{e:#}"),
        }
    }

    #[test]
    fn the_built_in_spec_parses_and_names_tlcs_pieces() {
        let spec = built_in();
        assert_eq!(name_of(&Value::Mapping(spec.init.clone())), Some(INIT_NAME));
        assert_eq!(default_image(), spec.image);
        assert!(spec.image.starts_with("ghcr.io/tlc-project/tlcd:"));
        assert_eq!(spec.init["command"][spec.tf_ports_at], Value::from("2222"));
        assert!(spec.grace_seconds >= 30, "below tlcd's drain_seconds");
        assert_eq!(spec.annotations["tlc.io/inject"], Value::from("true"));
        assert_eq!(
            spec.annotations["linkerd.io/inject"],
            Value::from("disabled")
        );
        assert_eq!(spec.labels["istio.io/dataplane-mode"], Value::from("none"));
        assert!(spec.volumes.iter().any(|v| name_of(v) == Some(TLS_VOLUME)));
    }

    #[test]
    fn a_broken_spec_is_refused_with_the_path() {
        let swapped = TEXT
            .replacen("- name: tlc-init", "- name: tlc-first", 1)
            .replacen("- name: tlc-sidecar", "- name: tlc-init", 1)
            .replacen("- name: tlc-first", "- name: tlc-sidecar", 1);
        let err = parse(&swapped).expect_err("order");
        assert!(
            err.to_string()
                .starts_with("template.spec.initContainers: "),
            "{err}"
        );
        let no_ports = TEXT.replacen("\"--tf-ports\", \"2222\", ", "", 1);
        let err = parse(&no_ports).expect_err("ports");
        assert!(
            err.to_string()
                .contains("initContainers[0].command: no --tf-ports"),
            "{err}"
        );
        let err = parse("template: {}").expect_err("empty");
        assert_eq!(err.to_string(), "template.metadata: missing");
    }
}
