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
mod explicit;
mod image;
mod mapping;
mod mesh;
mod objects;
mod pod;
mod pods;
mod record;
mod remove;
mod settings;
mod sidecar;
mod spec;
mod tensorflow;
mod uninject;

pub use config::CONFIG_MAP;
use settings::Flags;
pub use uninject::{run as run_uninject, UninjectArgs};

/// Arguments of `inject`.
#[derive(Debug, Args)]
#[command(after_help = "\
Only pods that run TensorFlow are injected, on TensorFlow's ports: a TFJob
replica (its port named tfjob-port, else 2222), TF_CONFIG (its cluster's
ports), --ps_hosts/--worker_hosts flags (their ports), a container named
tensorflow (its ports, else 2222). Anything else is left as it is, with a
warning (--force, --tf-ports or tlc.io/tf-ports inject it anyway); so is a
TFJob without parameter servers (nothing for tlc to do; --force), a pod
running as the sidecar's UID or using one of its ports. A TFJob gets tlc on
every replica or on none: one left out for any of these reasons is an error
naming it (--force writes it anyway, except in explicit mode, where the
others would dial a sidecar that is not there). Volcano Jobs (spec.tasks)
and Katib Experiments (spec.trialTemplate.trialSpec) are read; other kinds
(a PyTorchJob) are searched for pod templates and judged the same way.
Injected pods get Istio's and Linkerd's opt-outs (sidecar.istio.io/inject:
\"false\" as label and annotation, istio.io/dataplane-mode: none,
linkerd.io/inject: disabled); a value of the pod's that turned a mesh on is
overwritten, with a warning. What inject changed is recorded on each pod
(tlc.io/injected-changes): `tlcctl uninject` takes tlc out and puts it back,
and so does inject on a pod injected before and now opted out.
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

    /// The image of the tlc-init and tlc-sidecar containers: yours, built
    /// from deploy/container and pushed where your cluster pulls from (no
    /// registry serves one). Required, and checked as an image reference
    /// (REGISTRY/PATH[:TAG][@sha256:DIGEST]): the sidecar spec's name is a
    /// placeholder, refused, and a pod with it would never start.
    #[arg(long, value_name = "IMAGE", env = "TLC_IMAGE")]
    image: Option<String>,

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

    /// Explicit mode, for namespaces that refuse privileged containers:
    /// no iptables init container; the tensorflow container's TF_CONFIG is
    /// rewritten (its command wrapped) to dial the sidecar, which gets
    /// matching routes. TFJobs only.
    #[arg(long)]
    explicit: bool,

    /// Inject pods in which nothing says TensorFlow (on every port their
    /// containers declare, else 2222), and TFJobs without parameter
    /// servers.
    #[arg(long)]
    force: bool,

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
        let image = match self.image.as_deref().map(str::trim) {
            Some(image) => {
                image::check(image, spec::default_image())
                    .map_err(anyhow::Error::msg)
                    .context("--image")?;
                image.to_string()
            }
            None => bail!(
                "no image: give --image REGISTRY/tlcd:TAG (or TLC_IMAGE), an image built from \
                 deploy/container (deploy/container/build-image.sh) and pushed where the cluster \
                 pulls from; the sidecar spec's {} is a placeholder no registry serves",
                spec::default_image()
            ),
        };
        Ok(Flags {
            image,
            tf_ports,
            skip_ports,
            codec,
            sparsity,
            mtls: self.mtls,
            force: self.force,
            explicit: self.explicit,
        })
    }
}

/// Whether `-o` asks for JSON; YAML when not given, table refused.
fn wants_json(format: Option<Format>, command: &str) -> Result<bool> {
    match format {
        None | Some(Format::Yaml) => Ok(false),
        Some(Format::Json) => Ok(true),
        Some(Format::Table) => {
            bail!("{command} prints -o yaml (the default) or -o json, not table")
        }
    }
}

/// Writes the documents to stdout, as YAML or one JSON value.
fn write_documents(documents: &[Value], json: bool) -> Result<()> {
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
}

/// Runs `inject`. `format` is the global `-o` (YAML when not given).
pub fn run(args: &InjectArgs, format: Option<Format>, verbose: bool) -> Result<()> {
    let json = wants_json(format, "inject")?;
    let write = |documents: &[Value]| write_documents(documents, json);
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
        injected += pods::inject_document(document, sidecar_spec, &flags, &mut found)
            .context(label.clone())?;
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
