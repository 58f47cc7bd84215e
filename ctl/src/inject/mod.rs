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
mod mapping;
mod objects;
mod pod;
mod settings;
mod sidecar;
mod spec;
mod tensorflow;

pub use config::CONFIG_MAP;
use error::ManifestError;
use settings::{Annotations, Decision, Flags};

/// Arguments of `inject`.
#[derive(Debug, Args)]
#[command(after_help = "\
Only pods that run TensorFlow are injected, on TensorFlow's ports: a TFJob
replica (its port named tfjob-port, else 2222), TF_CONFIG (its cluster's
ports), --ps_hosts/--worker_hosts flags (their ports), a container named
tensorflow (its ports, else 2222). Anything else is left as it is, with a
warning (--force, --tf-ports or tlc.io/tf-ports inject it anyway); so is a
TFJob without parameter servers (nothing for tlc to do; --force), a pod
running as the sidecar's UID or using one of its ports. Volcano Jobs
(spec.tasks) and Katib Experiments (spec.trialTemplate.trialSpec) are read.
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
    /// registry serves one). Required: the sidecar spec's name is a
    /// placeholder, and a pod with it would never start.
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
            Some("") => bail!("--image: empty"),
            Some(image) => image.to_string(),
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
    let sidecar_uid = user_of(&sidecar_spec.sidecar);
    let mut sidecar_ports: Vec<u16> = tensorflow::container_ports(&sidecar_spec.sidecar, "")?
        .into_iter()
        .map(|(port, _)| port)
        .collect();
    sidecar_ports.push(crate::admin::DEFAULT_PORT);
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
            if let Some(uid) = sidecar_uid.filter(|uid| runs_as(spec, *uid)) {
                warnings.push(format!(
                    "{spec_path}: not injected: it runs as UID {uid}, the sidecar's, whose \
                     connections the redirect lets through: nothing would be compressed"
                ));
                continue;
            }
            // Every port the pod's own containers declare (tlc's left out).
            let used = tensorflow::declared_ports(
                spec,
                &spec_path,
                &["containers", "initContainers"],
                is_tlc,
            )?;
            let clash = used.into_iter().find(|port| sidecar_ports.contains(port));
            if let Some(port) = clash {
                warnings.push(format!(
                    "{spec_path}: not injected: a container uses port {port}, which the \
                     sidecar listens on"
                ));
                continue;
            }
            if found.tf_job.as_ref().is_some_and(|job| !job.has_ps) && !flags.force {
                warnings.push(format!(
                    "{spec_path}: not injected: the TFJob has no PS replica, and tlc compresses \
                     what parameter servers exchange (--force injects it anyway)"
                ));
                continue;
            }
            let tf = tensorflow::inspect(spec, &spec_path, found.tf_job.is_some())?;
            settings::resolve(flags, &annotations, spec, &spec_path, tf.as_ref())?
        };
        let mut settings = match decided {
            Decision::Inject(settings) => settings,
            Decision::OptedOut => continue,
            Decision::NotTensorflow => {
                warnings.push(format!(
                    "{spec_path}: not injected: nothing says it runs TensorFlow (a TFJob, a \
                     container named tensorflow, TF_CONFIG, --ps_hosts/--worker_hosts, a port \
                     named tfjob-port); --tf-ports, tlc.io/tf-ports or --force injects it"
                ));
                continue;
            }
        };
        if let Some(mesh) = mesh_injection(found.template) {
            warnings.push(format!(
                "{}: {mesh}'s injection turned off for this pod: tlc beside another proxy is \
                 untested (the mesh's policies and mTLS no longer apply to it)",
                error::join(&found.path, "metadata.annotations")
            ));
        }
        if flags.explicit {
            let Some(job) = &found.tf_job else {
                warnings.push(format!(
                    "{spec_path}: not injected: explicit mode (--explicit) takes TFJob replicas \
                     only, whose cluster the manifest names"
                ));
                continue;
            };
            let routes = explicit::routes(job, settings.tf_ports[0])
                .map_err(|e| ManifestError::new(spec_path.clone(), e))?;
            settings.routes = Some(routes);
        }
        let additions = sidecar::additions(sidecar_spec, &settings)?;
        pod::inject(found.template, &found.path, &additions)?;
        if flags.explicit {
            if let Some(Value::Mapping(spec)) = found.template.get_mut("spec") {
                explicit::wrap_tensorflow(spec, &spec_path)?;
            }
        }
        injected += 1;
    }
    Ok(injected)
}

/// The `runAsUser` of a container's or pod's `securityContext`.
fn user_of(object: &yaml_serde::Mapping) -> Option<u64> {
    object.get("securityContext")?.get("runAsUser")?.as_u64()
}

/// Whether a container is one of tlc's own (on a pod injected before).
fn is_tlc(container: &yaml_serde::Mapping) -> bool {
    let name = container.get("name").and_then(Value::as_str);
    name == Some(spec::INIT_NAME) || name == Some(spec::SIDECAR_NAME)
}

/// Whether the pod, or any of its own containers, runs as `uid`.
fn runs_as(spec: &yaml_serde::Mapping, uid: u64) -> bool {
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|key| spec.get(*key)?.as_sequence())
        .flatten()
        .filter_map(Value::as_mapping)
        .filter(|c| !is_tlc(c));
    user_of(spec) == Some(uid) || containers.filter_map(user_of).any(|u| u == uid)
}

/// The service mesh a pod template asks to be injected by, if any: its
/// own annotation, which the sidecar spec's turns off.
fn mesh_injection(template: &yaml_serde::Mapping) -> Option<&'static str> {
    let annotations = template.get("metadata")?.get("annotations")?;
    let is = |key: &str, on: &str| annotations.get(key).and_then(Value::as_str) == Some(on);
    if is("sidecar.istio.io/inject", "true") {
        Some("Istio")
    } else if is("linkerd.io/inject", "enabled") {
        Some("Linkerd")
    } else {
        None
    }
}
