//! The `config` crate's error for a word a setting does not take ("enum
//! Role does not have variant constructor sideways for key
//! `routes[0]role`") names a Rust type and not what the key allows. This
//! rewrites it as every other bad value is reported: the key, the value,
//! and the words allowed, read from the types themselves.

use serde::de::value::{Error as ValueError, StrDeserializer};
use serde::de::DeserializeOwned;
use tlc_core::ConfigError;

use super::LogFormat;

/// The words a string-valued enum of the configuration takes, from its
/// `Deserialize`: "`inbound`, `outbound`".
fn allowed<T: DeserializeOwned>() -> Option<String> {
    // No variant is named by a NUL: serde's answer lists the ones there are.
    let err = T::deserialize(StrDeserializer::<ValueError>::new("\u{0}")).err()?;
    let text = err.to_string();
    let (_, expected) = text.split_once("expected ")?;
    Some(expected.trim_start_matches("one of ").to_string())
}

/// The allowed words of the configuration's enum called `name`.
fn allowed_by_name(name: &str) -> Option<String> {
    match name {
        "Role" => allowed::<tlc_core::Role>(),
        "LogFormat" => allowed::<LogFormat>(),
        "LinkMode" => allowed::<tlc_sidecar::policy::LinkMode>(),
        "Directions" => allowed::<tlc_sidecar::policy::Directions>(),
        "TlsMode" => allowed::<tlc_proxy::tls::settings::TlsMode>(),
        _ => None,
    }
}

/// `message` as an [`ConfigError::Invalid`] naming the allowed words, when
/// it is the `config` crate's unknown-variant error for an enum known here.
pub fn rewrite(message: &str) -> Option<ConfigError> {
    let rest = message.split("enum ").nth(1)?;
    let (name, rest) = rest.split_once(" does not have variant constructor ")?;
    let (value, rest) = rest.split_once(" for key `")?;
    let (key, _) = rest.split_once('`')?;
    let allowed = allowed_by_name(name)?;
    Some(ConfigError::Invalid {
        key: dotted(key),
        value: value.to_string(),
        allowed: format!("expected {allowed}"),
    })
}

/// `routes[0]role` as written in a file: `routes[0].role`.
fn dotted(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 2);
    let mut after_index = false;
    for c in key.chars() {
        if after_index && c != '.' && c != '[' {
            out.push('.');
        }
        after_index = c == ']';
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_role_lists_the_roles() {
        let err =
            rewrite("enum Role does not have variant constructor sideways for key `routes[0]role`")
                .unwrap();
        assert_eq!(
            err.to_string(),
            "routes[0].role = sideways: expected `outbound` or `inbound`"
        );
    }

    #[test]
    fn every_enum_named_has_its_words() {
        for name in ["Role", "LogFormat", "LinkMode", "Directions", "TlsMode"] {
            let words = allowed_by_name(name).unwrap_or_default();
            assert!(words.contains('`'), "{name}: {words}");
        }
        assert!(allowed_by_name("Nothing").is_none());
    }

    #[test]
    fn other_messages_are_left_alone() {
        assert!(
            rewrite("invalid type: string \"x\", expected f64 for key `policy.min_bytes`")
                .is_none()
        );
        assert!(rewrite("enum Unknown does not have variant constructor x for key `a`").is_none());
    }

    #[test]
    fn keys_get_their_dots() {
        assert_eq!(dotted("routes[0]role"), "routes[0].role");
        assert_eq!(
            dotted("policy.overrides[2].direction"),
            "policy.overrides[2].direction"
        );
        assert_eq!(dotted("a[1][2]b"), "a[1][2].b");
    }
}
