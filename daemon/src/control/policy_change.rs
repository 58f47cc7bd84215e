//! The operator's shorthand for retuning compression (`POST /v1/policy`,
//! `tlcctl set ...`), turned into changes of configuration keys.

use std::collections::BTreeMap;

use serde_json::Value;
use tlc_admin_api::policy::PolicyRequest;

use super::ControlError;
use crate::config::Config;
use tlc_sidecar::policy::{Directions, OverrideSettings};

/// One retuning request: a [`PolicyRequest`] as the daemon reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyChange {
    /// Directions it applies to (default both).
    pub direction: Option<Directions>,
    /// A glob over tensor names: change (or add) the override for it
    /// instead of the direction's codec.
    pub tensor: Option<String>,
    /// New codec name.
    pub codec: Option<String>,
    /// New 3LC sparsity multiplier.
    pub sparsity: Option<f32>,
    /// New top-k share in percent.
    pub k: Option<f32>,
    /// Leave matching tensors uncompressed (overrides only).
    pub skip: Option<bool>,
    /// New size threshold for both directions (not with `tensor`).
    pub min_bytes: Option<u64>,
}

impl From<PolicyRequest> for PolicyChange {
    fn from(request: PolicyRequest) -> PolicyChange {
        // Numbers as f32, as a direct f32 field reads them.
        let number = |n: serde_json::Number| n.as_f64().map(|f| f as f32);
        PolicyChange {
            direction: request.direction,
            tensor: request.tensor,
            codec: request.codec,
            sparsity: request.sparsity.and_then(number),
            k: request.k.and_then(number),
            skip: request.skip,
            min_bytes: request.min_bytes,
        }
    }
}

/// The configuration keys to set in the API layer for `change`, given the
/// configuration in force. `null` values unset a key whatever lower layers
/// say (a sparsity left over from 3LC when the codec becomes int8).
pub fn keys_for(
    change: &PolicyChange,
    current: &Config,
) -> Result<BTreeMap<String, Value>, ControlError> {
    let bad = |message: &str| Err(ControlError::BadRequest(message.to_string()));
    if change.codec.is_none()
        && change.sparsity.is_none()
        && change.k.is_none()
        && change.skip.is_none()
        && change.min_bytes.is_none()
    {
        return bad("nothing to change: give codec, sparsity, k, skip or min_bytes");
    }
    let mut keys = BTreeMap::new();
    let Some(tensor) = &change.tensor else {
        if change.skip.is_some() {
            return bad("skip applies to a tensor pattern: give tensor");
        }
        if let Some(min_bytes) = change.min_bytes {
            keys.insert("policy.min_bytes".to_string(), Value::from(min_bytes));
        }
        let directions: &[&str] = match change.direction.unwrap_or_default() {
            Directions::Push => &["push"],
            Directions::Pull => &["pull"],
            Directions::Both => &["push", "pull"],
        };
        for direction in directions {
            let key = |field: &str| format!("policy.{direction}.{field}");
            if let Some(codec) = &change.codec {
                keys.insert(key("codec"), Value::from(codec.as_str()));
                if codec != "3lc" && change.sparsity.is_none() {
                    keys.insert(key("sparsity"), Value::Null);
                }
                if codec != "topk" && change.k.is_none() {
                    keys.insert(key("k"), Value::Null);
                }
            }
            if let Some(s) = change.sparsity {
                keys.insert(key("sparsity"), Value::from(s));
            }
            if let Some(k) = change.k {
                keys.insert(key("k"), Value::from(k));
            }
        }
        return Ok(keys);
    };
    if change.min_bytes.is_some() {
        return bad("min_bytes applies to every tensor: drop tensor");
    }
    let direction = change.direction.unwrap_or_default();
    let mut overrides = current.policy.overrides.clone();
    let mut entry = match overrides
        .iter()
        .position(|o| &o.tensor == tensor && o.direction == direction)
    {
        Some(i) => overrides.remove(i),
        None => OverrideSettings {
            tensor: tensor.clone(),
            direction,
            skip: false,
            codec: None,
            sparsity: None,
            k: None,
        },
    };
    if let Some(skip) = change.skip {
        entry.skip = skip;
    }
    if let Some(codec) = &change.codec {
        entry.skip = false;
        entry.codec = Some(codec.clone());
        if codec != "3lc" {
            entry.sparsity = None;
        }
        if codec != "topk" {
            entry.k = None;
        }
    }
    if change.sparsity.is_some() {
        entry.skip = false;
        entry.sparsity = change.sparsity;
    }
    if change.k.is_some() {
        entry.skip = false;
        entry.k = change.k;
    }
    // First match wins: the newest change goes first.
    overrides.insert(0, entry);
    let value = serde_json::to_value(&overrides)
        .map_err(|e| ControlError::BadRequest(format!("overrides: {e}")))?;
    keys.insert("policy.overrides".to_string(), value);
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_codec_change_unsets_what_no_longer_applies() {
        let change = PolicyChange {
            direction: Some(Directions::Push),
            codec: Some("int8".into()),
            ..PolicyChange::default()
        };
        let keys = keys_for(&change, &Config::default()).unwrap();
        assert_eq!(keys["policy.push.codec"], json!("int8"));
        assert_eq!(keys["policy.push.sparsity"], Value::Null);
        assert!(!keys.contains_key("policy.pull.codec"));
    }

    #[test]
    fn a_tensor_change_puts_its_override_first() {
        let mut config = Config::default();
        let first = PolicyChange {
            tensor: Some("*a*".into()),
            sparsity: Some(1.5),
            ..PolicyChange::default()
        };
        let keys = keys_for(&first, &config).unwrap();
        config.policy.overrides = serde_json::from_value(keys["policy.overrides"].clone()).unwrap();
        let second = PolicyChange {
            tensor: Some("*b*".into()),
            skip: Some(true),
            ..PolicyChange::default()
        };
        let keys = keys_for(&second, &config).unwrap();
        config.policy.overrides = serde_json::from_value(keys["policy.overrides"].clone()).unwrap();
        let again = PolicyChange {
            tensor: Some("*a*".into()),
            sparsity: Some(1.75),
            ..PolicyChange::default()
        };
        let keys = keys_for(&again, &config).unwrap();
        let overrides: Vec<OverrideSettings> =
            serde_json::from_value(keys["policy.overrides"].clone()).unwrap();
        let tensors: Vec<_> = overrides.iter().map(|o| o.tensor.as_str()).collect();
        assert_eq!(tensors, ["*a*", "*b*"]);
        assert_eq!(overrides[0].sparsity, Some(1.75));
        assert!(overrides[1].skip);
    }

    #[test]
    fn empty_and_contradictory_requests_are_refused() {
        let config = Config::default();
        assert!(keys_for(&PolicyChange::default(), &config).is_err());
        let skip_all = PolicyChange {
            skip: Some(true),
            ..PolicyChange::default()
        };
        assert!(keys_for(&skip_all, &config).is_err());
        let threshold_per_tensor = PolicyChange {
            tensor: Some("*".into()),
            min_bytes: Some(1),
            ..PolicyChange::default()
        };
        assert!(keys_for(&threshold_per_tensor, &config).is_err());
    }
}
