//! Adds tlc to one pod template, in place and idempotently: tlc's own
//! containers and volumes are replaced where they are, everything else of
//! the user's stays as it was, and what inject overwrites or creates is
//! noted in the pod's [`Changes`] for `tlcctl uninject`.

use yaml_serde::{Mapping, Sequence, Value};

use super::error::{join, ManifestError};
use super::mapping::{insert_before, name_of};
use super::record::{created, Changes, CHANGES};
use super::sidecar::Additions;
use super::spec::{INIT_NAME, SIDECAR_NAME, TLS_VOLUME};

/// Adds `additions` to the pod template at `path` (a mapping with
/// `metadata` and `spec`; for a bare Pod, the Pod itself), noting what it
/// changed in `changes`.
pub fn inject(
    template: &mut Mapping,
    path: &str,
    additions: &Additions,
    changes: &mut Changes,
) -> Result<(), ManifestError> {
    let spec_path = join(path, "spec");
    let spec = match template.get_mut("spec") {
        Some(Value::Mapping(spec)) => spec,
        Some(other) => return Err(ManifestError::expected(spec_path, "a mapping", other)),
        None => return Err(ManifestError::new(spec_path, "missing: no pod spec here")),
    };
    add_init_containers(spec, &spec_path, additions, changes)?;
    add_volumes(spec, &spec_path, additions, changes)?;
    raise_grace_period(spec, &spec_path, additions.grace_seconds, changes)?;
    let annotations = metadata_map(template, path, "annotations", changes)?;
    for (key, value) in &additions.annotations {
        if let Some(key) = key.as_str() {
            Changes::note(&mut changes.annotations, Some(annotations), key);
        }
        annotations.insert(key.clone(), value.clone());
    }
    if !additions.labels.is_empty() {
        let labels = metadata_map(template, path, "labels", changes)?;
        for (key, value) in &additions.labels {
            if let Some(key) = key.as_str() {
                Changes::note(&mut changes.labels, Some(labels), key);
            }
            labels.insert(key.clone(), value.clone());
        }
    }
    Ok(())
}

/// Writes `changes` into the pod template's annotation [`CHANGES`], last.
pub fn write_record(
    template: &mut Mapping,
    path: &str,
    changes: &Changes,
) -> Result<(), ManifestError> {
    let value = changes.to_annotation()?;
    let mut scratch = changes.clone();
    let annotations = metadata_map(template, path, "annotations", &mut scratch)?;
    annotations.insert(CHANGES.into(), value);
    Ok(())
}

/// The list at `key`, created (before `before`) when absent.
fn list<'a>(
    map: &'a mut Mapping,
    path: &str,
    key: &str,
    before: &str,
    changes: &mut Changes,
    created_key: &str,
) -> Result<&'a mut Sequence, ManifestError> {
    if map.get(key).is_none() {
        changes.created(created_key);
    }
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
    changes: &mut Changes,
) -> Result<(), ManifestError> {
    let init = list(
        spec,
        path,
        "initContainers",
        "containers",
        changes,
        created::INIT_CONTAINERS,
    )?;
    init.retain(|c| !matches!(name_of(c), Some(INIT_NAME | SIDECAR_NAME)));
    init.insert(0, additions.sidecar.clone());
    if let Some(tlc_init) = &additions.init {
        init.insert(0, tlc_init.clone());
    }
    Ok(())
}

/// tlc's volumes, each replacing one of the same name or appended; the
/// TLS volume is removed when this pod does not use it.
fn add_volumes(
    spec: &mut Mapping,
    path: &str,
    additions: &Additions,
    changes: &mut Changes,
) -> Result<(), ManifestError> {
    let volumes = list(spec, path, "volumes", "", changes, created::VOLUMES)?;
    for volume in &additions.volumes {
        let name = name_of(volume);
        match volumes.iter_mut().find(|v| name_of(v) == name) {
            Some(existing) => {
                // A volume of the user's by that name (not one of an
                // earlier injection, which has no record left by now).
                if let Some(name) = name {
                    if !changes.volumes.contains_key(name) && *existing != *volume {
                        changes.volumes.insert(name.to_string(), existing.clone());
                    }
                }
                *existing = volume.clone();
            }
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
fn raise_grace_period(
    spec: &mut Mapping,
    path: &str,
    least: u64,
    changes: &mut Changes,
) -> Result<(), ManifestError> {
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
        Changes::note(&mut changes.spec, Some(spec), KEY);
        spec.insert(KEY.into(), least.into());
    }
    Ok(())
}

/// The template's `metadata.annotations` or `metadata.labels` (`which`),
/// created (and noted in `changes`) when absent.
fn metadata_map<'a>(
    template: &'a mut Mapping,
    path: &str,
    which: &str,
    changes: &mut Changes,
) -> Result<&'a mut Mapping, ManifestError> {
    let metadata_path = join(path, "metadata");
    if template.get("metadata").is_none() {
        changes.created(created::METADATA);
    }
    if matches!(template.get("metadata"), None | Some(Value::Null)) {
        insert_before(template, "spec", "metadata", Value::Mapping(Mapping::new()));
    }
    let metadata = match template.get_mut("metadata") {
        Some(Value::Mapping(metadata)) => metadata,
        Some(other) => return Err(ManifestError::expected(metadata_path, "a mapping", other)),
        None => return Err(ManifestError::new(metadata_path, "missing")),
    };
    let map_path = join(&metadata_path, which);
    if metadata.get(which).is_none() {
        changes.created(if which == "labels" {
            created::LABELS
        } else {
            created::ANNOTATIONS
        });
    }
    if matches!(metadata.get(which), None | Some(Value::Null)) {
        metadata.insert(which.into(), Value::Mapping(Mapping::new()));
    }
    match metadata.get_mut(which) {
        Some(Value::Mapping(map)) => Ok(map),
        Some(other) => Err(ManifestError::expected(map_path, "a mapping", other)),
        None => Err(ManifestError::new(map_path, "missing")),
    }
}
