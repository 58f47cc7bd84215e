//! `tlcctl inject`: adds the tlc sidecar and its iptables init step to
//! every pod template in Kubernetes manifests, as `linkerd inject` does.
//!
//! Manifests are read as untyped trees ([`documents`]), their pod templates
//! found by kind ([`objects`]), the settings for each decided from flags
//! and `tlc.io/*` annotations ([`settings`]), and tlc's pieces put into each
//! pod spec ([`pod`]): the sidecar spec that the Kustomize overlays apply
//! too, `deploy/k8s/components/sidecar/sidecar.yaml`, built in ([`spec`]),
//! with each pod's settings on top ([`sidecar`]). The whole input is
//! checked before anything is written: a bad document is one error naming
//! its number and the path of the bad value, and no output at all.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use yaml_serde::Value;

use crate::admin::Format;

mod config;
mod documents;
mod error;
mod mapping;
mod objects;
mod pod;
mod settings;
mod sidecar;
mod spec;

use error::ManifestError;
use settings::{Annotations, Flags};

/// Arguments of `inject`.
#[derive(Debug, Args)]
#[command(after_help = "\
Annotations on a pod template (or its object) override the flags for it:
  tlc.io/inject: \"false\"     leave this pod as it is
  tlc.io/tf-ports: \"2222\"    tlc.io/skip-ports: \"2223\"
  tlc.io/codec: \"int8\"       tlc.io/sparsity: \"1.5\"
The pods mount the ConfigMap tlc-config (see --print-config) and the Secret
tlc-admin-token (key `token`), and with --mtls the Secret tlc-tls (tls.crt,
tls.key, ca.crt): inject does not create them (kubectl apply -k
deploy/k8s/base does). tlc-sidecar is a native sidecar: Kubernetes 1.29 or
later. The containers, volumes and annotations are the sidecar spec that the
Kustomize overlays apply too (deploy/k8s/components/sidecar/sidecar.yaml),
with each pod's settings on top. Injecting twice gives the same output as
once.")]
pub struct InjectArgs {
    /// Kubernetes YAML or JSON, one or more documents (`---`) or a `List`;
    /// `-` reads stdin.
    #[arg(value_name = "FILE", required_unless_present = "print_config")]
    input: Option<PathBuf>,

    /// The image of the tlc-init and tlc-sidecar containers; the default is
    /// the sidecar spec's (deploy/k8s/components/sidecar/sidecar.yaml).
    #[arg(long, value_name = "IMAGE", default_value = spec::default_image())]
    image: String,

    /// TensorFlow ports to intercept, comma-separated. Default: the ports of
    /// the container named `tensorflow`, else every containerPort, else 2222.
    #[arg(long, value_name = "PORTS")]
    tf_ports: Option<String>,

    /// TensorFlow ports not to intercept, comma-separated.
    #[arg(long, value_name = "PORTS")]
    skip_ports: Option<String>,

    /// Codec for pushes and pulls (tlcd's policy.push.codec and
    /// policy.pull.codec).
    #[arg(long, value_name = "CODEC")]
    codec: Option<String>,

    /// 3LC sparsity multiplier for pushes and pulls, 1 <= s < 2.
    #[arg(long, value_name = "S")]
    sparsity: Option<String>,

    /// Mutual TLS between sidecars, with certificates from the Secret
    /// tlc-tls.
    #[arg(long)]
    mtls: bool,

    /// Print the tlc-config ConfigMap the sidecars mount, and nothing else.
    #[arg(long, conflicts_with = "input")]
    print_config: bool,
}

impl InjectArgs {
    /// The flags, checked.
    fn flags(&self) -> Result<Flags> {
        let tf_ports = match &self.tf_ports {
            Some(list) => {
                let ports = settings::parse_ports(list)
                    .map_err(anyhow::Error::msg)
                    .context("--tf-ports")?;
                if ports.is_empty() {
                    bail!("--tf-ports: no port given");
                }
                Some(ports)
            }
            None => None,
        };
        let skip_ports = match &self.skip_ports {
            Some(list) => settings::parse_ports(list)
                .map_err(anyhow::Error::msg)
                .context("--skip-ports")?,
            None => Vec::new(),
        };
        let codec = match &self.codec {
            Some(codec) => Some(
                settings::check_codec(codec)
                    .map_err(anyhow::Error::msg)
                    .context("--codec")?,
            ),
            None => None,
        };
        let sparsity = match &self.sparsity {
            Some(s) => Some(
                settings::check_sparsity(s)
                    .map_err(anyhow::Error::msg)
                    .context("--sparsity")?,
            ),
            None => None,
        };
        if self.image.trim().is_empty() {
            bail!("--image: empty");
        }
        Ok(Flags {
            image: self.image.trim().to_string(),
            tf_ports,
            skip_ports,
            codec,
            sparsity,
            mtls: self.mtls,
        })
    }
}

/// Runs `inject`. `format` is the global `-o` (YAML when not given).
pub fn run(args: &InjectArgs, format: Option<Format>, verbose: bool) -> Result<()> {
    let json = match format {
        None | Some(Format::Yaml) => false,
        Some(Format::Json) => true,
        Some(Format::Table) => bail!("inject prints -o yaml (the default) or -o json, not table"),
    };
    let write = |documents: &[Value]| -> Result<()> {
        let text = if json {
            documents::to_json(documents)?
        } else {
            documents::to_yaml(documents)?
        };
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            .context("cannot write to stdout")
    };
    if args.print_config {
        return write(&[config::config_map()]);
    }
    let sidecar_spec = spec::get()?;
    let flags = args.flags()?;
    let (name, text) = read_input(args.input.as_deref())?;
    let mut documents = documents::parse(&text).with_context(|| format!("cannot read {name}"))?;
    let mut injected = 0usize;
    let mut warnings = Vec::new();
    for (i, document) in documents.iter_mut().enumerate() {
        let label = format!("{name}: document {}{}", i + 1, describe(document));
        let mut found = Vec::new();
        injected +=
            inject_document(document, sidecar_spec, &flags, &mut found).context(label.clone())?;
        warnings.extend(found.into_iter().map(|w| format!("{label}: {w}")));
    }
    write(&documents)?;
    for warning in warnings {
        eprintln!("tlcctl: warning: {warning}");
    }
    if verbose {
        eprintln!("tlcctl: injected {injected} pod template(s) from {name}");
    }
    Ok(())
}

/// The input's name for messages, and its text.
fn read_input(path: Option<&std::path::Path>) -> Result<(String, String)> {
    match path {
        None => bail!("no input: give a file, or - for stdin"),
        Some(path) if path.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read stdin")?;
            Ok(("stdin".to_string(), text))
        }
        Some(path) => {
            let name = path.display().to_string();
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {name}"))?;
            Ok((name, text))
        }
    }
}

/// ` (Deployment web)`, or nothing for a document without kind and name.
fn describe(document: &Value) -> String {
    let kind = document.get("kind").and_then(Value::as_str);
    let name = document
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str);
    match (kind, name) {
        (Some(kind), Some(name)) => format!(" ({kind} {name})"),
        (Some(kind), None) => format!(" ({kind})"),
        _ => String::new(),
    }
}

/// Injects every pod template of one document with `sidecar_spec` and the
/// flags; returns how many. Pods left alone for a reason the user may not
/// expect get a line in `warnings`.
fn inject_document(
    document: &mut Value,
    sidecar_spec: &spec::Spec,
    flags: &Flags,
    warnings: &mut Vec<String>,
) -> Result<usize> {
    let object = match document {
        Value::Null => return Ok(0),
        Value::Mapping(object) => object,
        other => {
            return Err(
                ManifestError::expected("", "a Kubernetes object (a mapping)", other).into(),
            )
        }
    };
    let mut injected = 0;
    for found in objects::pod_templates(object, "")? {
        let object_annotations = found
            .object_annotations
            .as_ref()
            .map(|(path, map)| (path.as_str(), map));
        let spec_path = error::join(&found.path, "spec");
        let decided = {
            let annotations = Annotations::new(found.template, &found.path, object_annotations)?;
            let spec = match found.template.get("spec") {
                Some(Value::Mapping(spec)) => spec,
                Some(other) => {
                    return Err(ManifestError::expected(spec_path, "a mapping", other).into())
                }
                None => {
                    return Err(ManifestError::new(spec_path, "missing: no pod spec here").into())
                }
            };
            if spec.get("hostNetwork") == Some(&Value::Bool(true)) {
                // tlc-init would rewrite the node's own iptables rules.
                warnings.push(format!(
                    "{}: not injected: a pod on the host's network cannot have a sidecar",
                    error::join(&spec_path, "hostNetwork")
                ));
                continue;
            }
            settings::resolve(flags, &annotations, spec, &spec_path)?
        };
        let Some(settings) = decided else {
            continue;
        };
        let additions = sidecar::additions(sidecar_spec, &settings)?;
        pod::inject(found.template, &found.path, &additions)?;
        injected += 1;
    }
    Ok(injected)
}
