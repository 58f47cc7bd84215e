//! Adds tlc to one pod template, in place and idempotently: tlc's own
//! containers and volumes are replaced where they are, everything else of
//! the user's stays as it was.

use yaml_serde::{Mapping, Sequence, Value};

use super::error::{join, ManifestError};
use super::mapping::{insert_before, name_of};
use super::sidecar::Additions;
use super::spec::{INIT_NAME, SIDECAR_NAME, TLS_VOLUME};

/// Adds `additions` to the pod template at `path` (a mapping with
/// `metadata` and `spec`; for a bare Pod, the Pod itself).
pub fn inject(
    template: &mut Mapping,
    path: &str,
    additions: &Additions,
) -> Result<(), ManifestError> {
    let spec_path = join(path, "spec");
    let spec = match template.get_mut("spec") {
        Some(Value::Mapping(spec)) => spec,
        Some(other) => return Err(ManifestError::expected(spec_path, "a mapping", other)),
        None => return Err(ManifestError::new(spec_path, "missing: no pod spec here")),
    };
    add_init_containers(spec, &spec_path, additions)?;
    add_volumes(spec, &spec_path, additions)?;
    raise_grace_period(spec, &spec_path, additions.grace_seconds)?;
    annotate(template, path, &additions.annotations)
}

/// The list at `key`, created (before `before`) when absent.
fn list<'a>(
    map: &'a mut Mapping,
    path: &str,
    key: &str,
    before: &str,
) -> Result<&'a mut Sequence, ManifestError> {
    if matches!(map.get(key), None | Some(Value::Null)) {
        insert_before(map, before, key, Value::Sequence(Sequence::new()));
    }
    match map.get_mut(key) {
        Some(Value::Sequence(list)) => Ok(list),
        Some(other) => Err(ManifestError::expected(join(path, key), "a list", other)),
        None => Err(ManifestError::new(join(path, key), "missing")),
    }
}

/// `tlc-init` first in `initContainers` (if the pod gets one),
/// `tlc-sidecar` right after it, wherever they were before.
fn add_init_containers(
    spec: &mut Mapping,
    path: &str,
    additions: &Additions,
) -> Result<(), ManifestError> {
    let init = list(spec, path, "initContainers", "containers")?;
    init.retain(|c| !matches!(name_of(c), Some(INIT_NAME | SIDECAR_NAME)));
    init.insert(0, additions.sidecar.clone());
    if let Some(tlc_init) = &additions.init {
        init.insert(0, tlc_init.clone());
    }
    Ok(())
}

/// tlc's volumes, each replacing one of the same name or appended; the
/// TLS volume is removed when this pod does not use it.
fn add_volumes(spec: &mut Mapping, path: &str, additions: &Additions) -> Result<(), ManifestError> {
    let volumes = list(spec, path, "volumes", "")?;
    for volume in &additions.volumes {
        let name = name_of(volume);
        match volumes.iter_mut().find(|v| name_of(v) == name) {
            Some(existing) => *existing = volume.clone(),
            None => volumes.push(volume.clone()),
        }
    }
    let wants_tls = additions
        .volumes
        .iter()
        .any(|v| name_of(v) == Some(TLS_VOLUME));
    if !wants_tls {
        volumes.retain(|v| name_of(v) != Some(TLS_VOLUME));
    }
    Ok(())
}

/// `terminationGracePeriodSeconds` raised to at least `least` (the spec's,
/// 40) so that tlcd can drain, never lowered.
fn raise_grace_period(spec: &mut Mapping, path: &str, least: u64) -> Result<(), ManifestError> {
    const KEY: &str = "terminationGracePeriodSeconds";
    let enough = match spec.get(KEY) {
        None | Some(Value::Null) => false,
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {
            n.as_u64().is_some_and(|n| n >= least)
        }
        Some(other) => {
            return Err(ManifestError::expected(
                join(path, KEY),
                "a whole number of seconds",
                other,
            ))
        }
    };
    if !enough {
        spec.insert(KEY.into(), least.into());
    }
    Ok(())
}

/// The spec's annotations (scrape, `tlc.io/inject: "true"`) on the template.
fn annotate(template: &mut Mapping, path: &str, added: &Mapping) -> Result<(), ManifestError> {
    let metadata_path = join(path, "metadata");
    if matches!(template.get("metadata"), None | Some(Value::Null)) {
        insert_before(template, "spec", "metadata", Value::Mapping(Mapping::new()));
    }
    let metadata = match template.get_mut("metadata") {
        Some(Value::Mapping(metadata)) => metadata,
        Some(other) => return Err(ManifestError::expected(metadata_path, "a mapping", other)),
        None => return Err(ManifestError::new(metadata_path, "missing")),
    };
    if matches!(metadata.get("annotations"), None | Some(Value::Null)) {
        metadata.insert("annotations".into(), Value::Mapping(Mapping::new()));
    }
    let annotations = match metadata.get_mut("annotations") {
        Some(Value::Mapping(annotations)) => annotations,
        Some(other) => {
            return Err(ManifestError::expected(
                join(&metadata_path, "annotations"),
                "a mapping",
                other,
            ))
        }
        None => {
            return Err(ManifestError::new(
                join(&metadata_path, "annotations"),
                "missing",
            ))
        }
    };
    for (key, value) in added {
        annotations.insert(key.clone(), value.clone());
    }
    Ok(())
}
