//! What one pod gets: the command line's settings, overridden by the
//! `tlc.io/*` annotations of its pod template, then of its object.

use yaml_serde::{Mapping, Value};

use super::error::{describe, join, ManifestError};
use super::tensorflow::{self, Tensorflow};
use crate::codec::spec::CodecName;

/// Turns injection off for one pod template or object: `tlc.io/inject: "false"`.
pub const INJECT: &str = "tlc.io/inject";
/// The TensorFlow ports to intercept, comma-separated.
pub const TF_PORTS: &str = "tlc.io/tf-ports";
/// TensorFlow ports not to intercept, comma-separated.
pub const SKIP_PORTS: &str = "tlc.io/skip-ports";
/// The codec, both directions.
pub const CODEC: &str = "tlc.io/codec";
/// The 3LC sparsity multiplier, both directions.
pub const SPARSITY: &str = "tlc.io/sparsity";

/// Settings from the command line, already validated.
#[derive(Debug, Clone)]
pub struct Flags {
    /// The sidecar image.
    pub image: String,
    /// `--tf-ports`; `None`: found in each pod.
    pub tf_ports: Option<Vec<u16>>,
    /// `--skip-ports`.
    pub skip_ports: Vec<u16>,
    /// `--codec`.
    pub codec: Option<String>,
    /// `--sparsity`, as typed.
    pub sparsity: Option<String>,
    /// `--mtls`.
    pub mtls: bool,
    /// `--force`: inject pods in which nothing says TensorFlow.
    pub force: bool,
    /// `--explicit`: no iptables; TensorFlow's addresses rewritten.
    pub explicit: bool,
}

/// What one pod gets.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSettings {
    /// The image of both tlc containers.
    pub image: String,
    /// The ports `tlc-init` redirects, never empty.
    pub tf_ports: Vec<u16>,
    /// The codec for pushes and pulls, if set.
    pub codec: Option<String>,
    /// The sparsity for pushes and pulls, if set.
    pub sparsity: Option<String>,
    /// Explicit mode's routes (`--route` values of `tlc-sidecar`; no
    /// `tlc-init`); `None`: transparent mode.
    pub routes: Option<Vec<String>>,
    /// Whether the sidecars speak mutual TLS.
    pub mtls: bool,
}

/// The annotations that apply to one pod template: its own, then its
/// object's (the same ones for a bare Pod).
pub struct Annotations<'a> {
    layers: Vec<(String, &'a Mapping)>,
}

impl<'a> Annotations<'a> {
    /// The annotations of the pod template at `template_path`, then those
    /// of its object with their path (`None` for a bare Pod, whose
    /// template is itself).
    pub fn new(
        template: &'a Mapping,
        template_path: &str,
        object: Option<(&str, &'a Mapping)>,
    ) -> Result<Annotations<'a>, ManifestError> {
        let path = join(&join(template_path, "metadata"), "annotations");
        let found = match template.get("metadata") {
            None | Some(Value::Null) => None,
            Some(Value::Mapping(metadata)) => metadata.get("annotations"),
            Some(other) => {
                return Err(ManifestError::expected(
                    join(template_path, "metadata"),
                    "a mapping",
                    other,
                ))
            }
        };
        let mut layers = Vec::new();
        match found {
            None | Some(Value::Null) => {}
            Some(Value::Mapping(annotations)) => layers.push((path, annotations)),
            Some(other) => return Err(ManifestError::expected(path, "a mapping", other)),
        }
        if let Some((path, object)) = object {
            layers.push((path.to_string(), object));
        }
        Ok(Annotations { layers })
    }

    /// The first value of `key`, as a string, with its path.
    fn get(&self, key: &str) -> Result<Option<(String, String)>, ManifestError> {
        Ok(self.all(key)?.into_iter().next())
    }

    /// Every value of `key`, most specific first, as strings with their paths.
    fn all(&self, key: &str) -> Result<Vec<(String, String)>, ManifestError> {
        let mut found = Vec::new();
        for (path, annotations) in &self.layers {
            let Some(value) = annotations.get(key) else {
                continue;
            };
            let path = join(path, key);
            let text = match value {
                Value::String(s) => s.trim().to_string(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                other => {
                    return Err(ManifestError::new(
                        path,
                        format!("an annotation must be a string, found {}", describe(other)),
                    ))
                }
            };
            found.push((path, text));
        }
        Ok(found)
    }
}

/// What `inject` does with one pod template.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Injected with these settings.
    Inject(PodSettings),
    /// `tlc.io/inject: "false"`: left as it is, as asked.
    OptedOut,
    /// Nothing in it says TensorFlow, and no TensorFlow port was given:
    /// left as it is, with a warning.
    NotTensorflow,
}

/// Decides for one pod. `spec` is the pod spec at `spec_path`; `tf` what
/// in it says TensorFlow, if anything.
pub fn resolve(
    flags: &Flags,
    annotations: &Annotations<'_>,
    spec: &Mapping,
    spec_path: &str,
    tf: Option<&Tensorflow>,
) -> Result<Decision, ManifestError> {
    // "false" on the template or on its object skips: the "true" inject
    // writes on the template must not hide a later "false" on the object.
    let mut skip_pod = false;
    for (path, value) in annotations.all(INJECT)? {
        match value.as_str() {
            "false" => skip_pod = true,
            "true" => {}
            _ => {
                return Err(ManifestError::new(
                    path,
                    format!("{value:?} is neither \"true\" nor \"false\""),
                ))
            }
        }
    }
    if skip_pod {
        return Ok(Decision::OptedOut);
    }
    // Every annotation is checked, also on a pod left alone below.
    let codec = match annotations.get(CODEC)? {
        Some((path, codec)) => Some(check_codec(&codec).map_err(|e| ManifestError::new(path, e))?),
        None => flags.codec.clone(),
    };
    let sparsity = match annotations.get(SPARSITY)? {
        Some((path, s)) => Some(check_sparsity(&s).map_err(|e| ManifestError::new(path, e))?),
        None => flags.sparsity.clone(),
    };
    let found = match (annotations.get(TF_PORTS)?, &flags.tf_ports, tf) {
        (Some((path, list)), _, _) => {
            parse_ports(&list).map_err(|e| ManifestError::new(path, e))?
        }
        (None, Some(ports), _) => ports.clone(),
        (None, None, Some(tf)) => tf.ports.clone(),
        (None, None, None) if flags.force => every_port(spec, spec_path)?,
        (None, None, None) => return Ok(Decision::NotTensorflow),
    };
    let (skip_path, skip_source, skip) = match annotations.get(SKIP_PORTS)? {
        Some((path, list)) => {
            let ports = parse_ports(&list).map_err(|e| ManifestError::new(path.clone(), e))?;
            (path, SKIP_PORTS, ports)
        }
        None => (
            spec_path.to_string(),
            "--skip-ports",
            flags.skip_ports.clone(),
        ),
    };
    let tf_ports: Vec<u16> = found
        .iter()
        .copied()
        .filter(|p| !skip.contains(p))
        .collect();
    if tf_ports.is_empty() {
        return Err(ManifestError::new(
            skip_path,
            format!(
                "{skip_source} {} leaves none of the TensorFlow ports {} to intercept; \
                 annotate the pod template with {INJECT}: \"false\" instead",
                join_ports(&skip),
                join_ports(&found)
            ),
        ));
    }
    Ok(Decision::Inject(PodSettings {
        image: flags.image.clone(),
        tf_ports,
        codec,
        sparsity,
        routes: None,
        mtls: flags.mtls,
    }))
}

/// `--force` on a pod where nothing says TensorFlow: every TCP port its
/// containers declare, else TensorFlow's usual 2222.
fn every_port(spec: &Mapping, spec_path: &str) -> Result<Vec<u16>, ManifestError> {
    let mut ports = tensorflow::declared_ports(spec, spec_path, &["containers"], |_| false)?;
    tensorflow::dedup(&mut ports);
    if ports.is_empty() {
        ports.push(tensorflow::TFJOB_DEFAULT_PORT);
    }
    Ok(ports)
}

/// Parses `2222,2223` (spaces allowed); an empty list is allowed.
pub fn parse_ports(list: &str) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<u16>() {
            Ok(port) if port > 0 => ports.push(port),
            _ => return Err(format!("{part:?} is not a port number (1-65535)")),
        }
    }
    tensorflow::dedup(&mut ports);
    Ok(ports)
}

/// Checks a codec name the way tlcd and `tlcctl codec` read it.
pub fn check_codec(name: &str) -> Result<String, String> {
    let name = name.trim();
    CodecName::parse(name).map_err(|e| format!("{e:#}"))?;
    Ok(name.to_string())
}

/// Checks a 3LC sparsity multiplier: a number with `1 <= s < 2`.
pub fn check_sparsity(text: &str) -> Result<String, String> {
    let text = text.trim();
    let s: f32 = text
        .parse()
        .map_err(|_| format!("sparsity {text:?} is not a number"))?;
    tlc_codec::Sparsity::new(s).map_err(|e| e.to_string())?;
    Ok(text.to_string())
}

/// `2222,2223`.
pub fn join_ports(ports: &[u16]) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_lists_are_checked_and_deduplicated() {
        assert_eq!(parse_ports(" 2222, 2223,2222,"), Ok(vec![2222, 2223]));
        assert_eq!(parse_ports(""), Ok(vec![]));
        assert!(parse_ports("0").is_err());
        assert!(parse_ports("65536").is_err());
        assert!(parse_ports("http").is_err());
    }

    #[test]
    fn codec_and_sparsity_are_checked_as_tlcd_would() {
        assert_eq!(check_codec(" int8 "), Ok("int8".to_string()));
        assert!(check_codec("topk5").is_ok());
        assert!(check_codec("zip").is_err());
        assert_eq!(check_sparsity("1.75"), Ok("1.75".to_string()));
        assert!(check_sparsity("2").is_err());
        assert!(check_sparsity("0.5").is_err());
        assert!(check_sparsity("NaN").is_err());
    }
}
