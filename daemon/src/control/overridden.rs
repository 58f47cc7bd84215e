//! Config file changes that do not take effect because a higher layer
//! (a `TLC_*` variable, a flag, the admin API) sets the same key: the
//! operator who edits the ConfigMap of a pod whose manifest also sets
//! `TLC_POLICY__PUSH__CODEC` is told so at the reload, not left to wonder.

use crate::config::layers::{self, Origin, Resolved};

/// The keys whose value differs between two texts of the config file,
/// dotted (`policy.push.codec`); tables compared leaf by leaf, arrays
/// whole. A text that does not parse has no keys.
pub fn changed_keys(old: Option<&str>, new: Option<&str>) -> Vec<String> {
    let old = old.map(layers::file_leaves).unwrap_or_default();
    let new = new.map(layers::file_leaves).unwrap_or_default();
    let mut keys: Vec<String> = new
        .iter()
        .filter(|(key, value)| old.get(*key) != Some(*value))
        .map(|(key, _)| key.clone())
        .chain(old.keys().filter(|k| !new.contains_key(*k)).cloned())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Of `changed` file keys, those a layer above the file sets in
/// `resolved`, each as `KEY (ORIGIN)`.
pub fn overridden(changed: &[String], resolved: &Resolved) -> Vec<String> {
    changed
        .iter()
        .filter_map(|key| match resolved.sources.get(key) {
            Some(origin @ (Origin::Env(_) | Origin::Flag(_) | Origin::Api)) => {
                Some(format!("{key} ({origin})"))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_leaves_are_found_added_and_removed_included() {
        let old = "[policy]\nmin_bytes = 4096\n[policy.push]\ncodec = \"3lc\"\nsparsity = 1.0\n";
        let new = "[policy]\nmin_bytes = 4096\n[policy.push]\ncodec = \"int8\"\n[log]\nlevel = \"debug\"\n";
        assert_eq!(
            changed_keys(Some(old), Some(new)),
            ["log.level", "policy.push.codec", "policy.push.sparsity"]
        );
        assert!(changed_keys(Some(old), Some(old)).is_empty());
    }
}
