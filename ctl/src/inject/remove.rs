//! Takes tlc out of one pod template: its containers and volumes, found by
//! name, and what the record ([`super::record`]) says inject changed, put
//! back as it was. `tlcctl uninject` does this to every pod template; inject
//! does it first to a pod it injected before, so that injecting again starts
//! from the user's own template.

use yaml_serde::{Mapping, Value};

use super::error::{join, ManifestError};
use super::explicit;
use super::mapping::name_of;
use super::record::{created, Changes, CHANGES};
use super::settings::INJECT;
use super::spec::{self, INIT_NAME, SIDECAR_NAME};

/// What [`take_out`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// No tlc in the pod.
    Nothing,
    /// tlc taken out, and everything inject had changed put back.
    Restored,
    /// tlc's containers and volumes taken out, with no record of what else
    /// inject had changed (an older tlcctl, or the Kustomize Component).
    WithoutRecord,
}

/// Takes tlc out of the pod template at `path`. With `record_only`, a pod
/// without a record is left as it is (and reported as
/// [`Removed::WithoutRecord`] if it has tlc's containers).
pub fn take_out(
    template: &mut Mapping,
    path: &str,
    record_only: bool,
) -> Result<Removed, ManifestError> {
    let changes = Changes::read(template, path)?;
    let spec_path = join(path, "spec");
    let has_containers = match template.get("spec") {
        Some(Value::Mapping(spec)) => ["initContainers", "containers"]
            .iter()
            .filter_map(|key| spec.get(*key)?.as_sequence())
            .flatten()
            .any(|c| matches!(name_of(c), Some(INIT_NAME | SIDECAR_NAME))),
        _ => false,
    };
    let (changes, removed) = match changes {
        Some(changes) => (changes, Removed::Restored),
        None if !has_containers => return Ok(Removed::Nothing),
        None if record_only => return Ok(Removed::WithoutRecord),
        None => (Changes::default(), Removed::WithoutRecord),
    };
    if let Some(Value::Mapping(spec)) = template.get_mut("spec") {
        restore_spec(spec, &spec_path, &changes)?;
    }
    restore_metadata(template, &changes);
    Ok(removed)
}

/// The pod spec: tlc's containers and volumes out, the user's volumes and
/// fields back, explicit mode's wrapper off the commands.
fn restore_spec(spec: &mut Mapping, path: &str, changes: &Changes) -> Result<(), ManifestError> {
    if let Some(Value::Sequence(inits)) = spec.get_mut("initContainers") {
        inits.retain(|c| !matches!(name_of(c), Some(INIT_NAME | SIDECAR_NAME)));
    }
    remove_if_created_and_empty(spec, "initContainers", changes, created::INIT_CONTAINERS);
    let tlc_volumes: Vec<String> = spec::get()
        .map(|s| {
            s.volumes
                .iter()
                .filter_map(name_of)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if let Some(Value::Sequence(volumes)) = spec.get_mut("volumes") {
        let mut kept = Vec::with_capacity(volumes.len());
        for volume in std::mem::take(volumes) {
            match name_of(&volume) {
                Some(name) if tlc_volumes.iter().any(|v| v == name) => {
                    if let Some(users) = changes.volumes.get(name) {
                        kept.push(users.clone());
                    }
                }
                _ => kept.push(volume),
            }
        }
        *volumes = kept;
    }
    remove_if_created_and_empty(spec, "volumes", changes, created::VOLUMES);
    for (key, before) in &changes.spec {
        put_back(spec, key, before.as_ref());
    }
    for name in &changes.wrapped {
        unwrap_command(spec, path, name)?;
    }
    Ok(())
}

/// Takes explicit mode's wrapper off the command of container `name`.
fn unwrap_command(spec: &mut Mapping, path: &str, name: &str) -> Result<(), ManifestError> {
    let Some(Value::Sequence(containers)) = spec.get_mut("containers") else {
        return Ok(());
    };
    let Some(container) = containers
        .iter_mut()
        .filter_map(Value::as_mapping_mut)
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
    else {
        return Ok(());
    };
    if let Some(Value::Sequence(command)) = container.get_mut("command") {
        if explicit::is_wrapped(command) {
            command.drain(..explicit::WRAPPER_ARGS);
            return Ok(());
        }
    }
    Err(ManifestError::new(
        join(&join(&join(path, "containers"), name), "command"),
        "the record says explicit mode wrapped this command, and the wrapper is not there any \
         more: put the command back by hand",
    ))
}

/// The template's annotations and labels as they were; keys inject created
/// gone again. A `tlc.io/inject: "false"` written after injecting stays:
/// it is the user's latest word.
fn restore_metadata(template: &mut Mapping, changes: &Changes) {
    let Some(Value::Mapping(metadata)) = template.get_mut("metadata") else {
        return;
    };
    if let Some(Value::Mapping(annotations)) = metadata.get_mut("annotations") {
        annotations.shift_remove(CHANGES);
        for (key, before) in &changes.annotations {
            let opted_out = key == INJECT
                && annotations.get(key.as_str()).and_then(Value::as_str) == Some("false");
            if !opted_out {
                put_back(annotations, key, before.as_ref());
            }
        }
    }
    remove_if_created_and_empty(metadata, "annotations", changes, created::ANNOTATIONS);
    if let Some(Value::Mapping(labels)) = metadata.get_mut("labels") {
        for (key, before) in &changes.labels {
            put_back(labels, key, before.as_ref());
        }
    }
    remove_if_created_and_empty(metadata, "labels", changes, created::LABELS);
    let empty = metadata.is_empty();
    if empty && changes.was_created(created::METADATA) {
        template.shift_remove("metadata");
    }
}

/// `key` set back to `before`, in place, or removed when it was absent.
fn put_back(map: &mut Mapping, key: &str, before: Option<&Value>) {
    match before {
        Some(value) => {
            map.insert(key.into(), value.clone());
        }
        None => {
            map.shift_remove(key);
        }
    }
}

/// Removes `key` of `map` when inject created it and it is empty again.
fn remove_if_created_and_empty(map: &mut Mapping, key: &str, changes: &Changes, which: &str) {
    let empty = match map.get(key) {
        Some(Value::Sequence(list)) => list.is_empty(),
        Some(Value::Mapping(inner)) => inner.is_empty(),
        _ => false,
    };
    if empty && changes.was_created(which) {
        map.shift_remove(key);
    }
}
