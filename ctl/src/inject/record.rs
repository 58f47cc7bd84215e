//! What inject changed in one pod template, kept on the template itself
//! (the annotation [`CHANGES`], a line of JSON) so that `tlcctl uninject`,
//! and inject itself on a pod it injected before, can give the user's
//! values back: the annotations and labels it overwrote, the grace period
//! it raised, a volume of the user's it replaced, the keys it created and
//! the commands explicit mode wrapped. tlc's own containers and volumes
//! need no record: they are found by name.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use yaml_serde::{Mapping, Value};

use super::error::{join, ManifestError};

/// The annotation holding the record.
pub const CHANGES: &str = "tlc.io/injected-changes";

/// Keys of a pod template that inject may create, as [`Changes::created`]
/// names them.
pub mod created {
    /// `metadata`.
    pub const METADATA: &str = "metadata";
    /// `metadata.annotations`.
    pub const ANNOTATIONS: &str = "metadata.annotations";
    /// `metadata.labels`.
    pub const LABELS: &str = "metadata.labels";
    /// `spec.initContainers`.
    pub const INIT_CONTAINERS: &str = "spec.initContainers";
    /// `spec.volumes`.
    pub const VOLUMES: &str = "spec.volumes";
}

/// What inject changed in one pod template. Each map holds the value a key
/// had before inject set it; `None`: the key was absent.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Changes {
    /// Pod template annotations inject set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, Option<Value>>,
    /// Pod template labels inject set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, Option<Value>>,
    /// Pod spec fields inject set (`terminationGracePeriodSeconds`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub spec: BTreeMap<String, Option<Value>>,
    /// The user's volumes a tlc volume of the same name replaced, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volumes: BTreeMap<String, Value>,
    /// Keys inject created (see [`created`]), removed again when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created: Vec<String>,
    /// The containers whose command explicit mode wrapped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wrapped: Vec<String>,
}

impl Changes {
    /// Notes that `key` of `map` is about to be set; the first value seen
    /// is the user's, later ones are inject's own.
    pub fn note(record: &mut BTreeMap<String, Option<Value>>, map: Option<&Mapping>, key: &str) {
        if !record.contains_key(key) {
            record.insert(key.to_string(), map.and_then(|m| m.get(key)).cloned());
        }
    }

    /// Notes that inject created `key` (one of [`created`]).
    pub fn created(&mut self, key: &str) {
        if !self.created.iter().any(|k| k == key) {
            self.created.push(key.to_string());
        }
    }

    /// Whether inject created `key`.
    pub fn was_created(&self, key: &str) -> bool {
        self.created.iter().any(|k| k == key)
    }

    /// The record as the annotation's value: one line of JSON.
    pub fn to_annotation(&self) -> Result<Value, ManifestError> {
        serde_json::to_string(self)
            .map(Value::from)
            .map_err(|e| ManifestError::new(CHANGES, format!("cannot write the record: {e}")))
    }

    /// The record of the pod template at `path`, if it has one.
    pub fn read(template: &Mapping, path: &str) -> Result<Option<Changes>, ManifestError> {
        let Some(value) = template
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(CHANGES))
        else {
            return Ok(None);
        };
        let path = join(&join(&join(path, "metadata"), "annotations"), CHANGES);
        let Some(text) = value.as_str() else {
            return Err(ManifestError::expected(path, "a string", value));
        };
        serde_json::from_str(text).map(Some).map_err(|e| {
            ManifestError::new(
                path,
                format!("not a record tlcctl inject wrote ({e}); remove tlc by hand"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_back_as_written() {
        let mut changes = Changes::default();
        let map: Mapping = yaml_serde::from_str("a: 'true'").expect("yaml");
        Changes::note(&mut changes.annotations, Some(&map), "a");
        Changes::note(&mut changes.annotations, Some(&map), "b");
        changes.created(created::LABELS);
        let text = changes.to_annotation().expect("json");
        assert_eq!(
            text.as_str(),
            Some(r#"{"annotations":{"a":"true","b":null},"created":["metadata.labels"]}"#)
        );
        let mut template = Mapping::new();
        let mut annotations = Mapping::new();
        annotations.insert(CHANGES.into(), text);
        let mut metadata = Mapping::new();
        metadata.insert("annotations".into(), Value::Mapping(annotations));
        template.insert("metadata".into(), Value::Mapping(metadata));
        assert_eq!(Changes::read(&template, "").expect("read"), Some(changes));
    }
}
