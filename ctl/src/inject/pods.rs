//! Injecting the pod templates of one document: for each, what inject
//! decides (inject, or leave it and why), tlc added, and what that changed
//! noted on the pod; then, for a TFJob, that every replica got the sidecar
//! or none did, since one half of a job with tlc and the other without
//! cannot talk.

use anyhow::{bail, Result};
use yaml_serde::{Mapping, Value};

use super::error::{self, ManifestError};
use super::explicit;
use super::mesh;
use super::objects::{self, PodTemplate};
use super::pod;
use super::record::Changes;
use super::remove::{self, Removed};
use super::settings::{self, Annotations, Decision, Flags};
use super::sidecar;
use super::spec;
use super::tensorflow;

/// What became of one pod template.
enum Outcome {
    /// Injected.
    Injected,
    /// Left without tlc, for this reason; `warn`: a reason the user may
    /// not expect (an opt-out is not one).
    Left { reason: String, warn: bool },
}

/// One TFJob of a document: where it is, its name, and what became of
/// each of its replicas.
struct Job {
    path: String,
    name: String,
    replicas: Vec<(String, Outcome)>,
}

/// Injects every pod template of one document with `sidecar_spec` and the
/// flags; returns how many. Pods left alone for a reason the user may not
/// expect, and what inject changed that the user should know of, get a
/// line in `warnings`.
pub fn inject_document(
    document: &mut Value,
    sidecar_spec: &spec::Spec,
    flags: &Flags,
    warnings: &mut Vec<String>,
) -> Result<usize> {
    let Some(object) = objects::object_of(document)? else {
        return Ok(0);
    };
    let mut injected = 0;
    // The replicas of each TFJob (by the path of the job), with what
    // became of each.
    let mut jobs: Vec<Job> = Vec::new();
    for mut found in objects::pod_templates(object, "")? {
        let spec_path = error::join(&found.path, "spec");
        let before = remove::take_out(found.template, &found.path, true)?;
        let outcome = inject_template(&mut found, sidecar_spec, flags, warnings)?;
        match (&outcome, before) {
            (Outcome::Injected, _) => injected += 1,
            (Outcome::Left { reason, .. }, Removed::Restored) => warnings.push(format!(
                "{spec_path}: tlc taken out (injected before, and now left without it: {reason}); \
                 what inject had changed is put back"
            )),
            (Outcome::Left { reason, .. }, Removed::WithoutRecord) => warnings.push(format!(
                "{spec_path}: not injected, but it has tlc's containers, from an injection \
                 with no record of what it changed (an older tlcctl, or the Kustomize \
                 Component): they are left in; `tlcctl uninject` takes them out ({reason})"
            )),
            (Outcome::Left { reason, warn: true }, Removed::Nothing) => {
                warnings.push(format!("{spec_path}: not injected: {reason}"));
            }
            (Outcome::Left { warn: false, .. }, Removed::Nothing) => {}
        }
        if let Some(job) = &found.tf_job {
            let job_path = match found.path.rfind("spec.tfReplicaSpecs") {
                Some(at) => found.path[..at].to_string(),
                None => String::new(),
            };
            let replica = found
                .path
                .rsplit('.')
                .nth(1)
                .unwrap_or(found.path.as_str())
                .to_string();
            match jobs.iter_mut().find(|j| j.path == job_path) {
                Some(j) => j.replicas.push((replica, outcome)),
                None => jobs.push(Job {
                    path: job_path,
                    name: job.name.clone(),
                    replicas: vec![(replica, outcome)],
                }),
            }
        }
    }
    for job in &jobs {
        check_whole_job(job, flags, warnings)?;
    }
    Ok(injected)
}

/// A TFJob's replicas: all injected or none, but with `--force` outside
/// explicit mode.
fn check_whole_job(job: &Job, flags: &Flags, warnings: &mut Vec<String>) -> Result<()> {
    let Job {
        path,
        name,
        replicas,
    } = job;
    let (with, without): (Vec<_>, Vec<_>) = replicas
        .iter()
        .partition(|(_, outcome)| matches!(outcome, Outcome::Injected));
    if with.is_empty() || without.is_empty() {
        return Ok(());
    }
    let injected: Vec<&str> = with.iter().map(|(r, _)| r.as_str()).collect();
    let left: Vec<String> = without
        .iter()
        .map(|(replica, outcome)| match outcome {
            Outcome::Left { reason, .. } => format!("{replica} ({reason})"),
            Outcome::Injected => replica.clone(),
        })
        .collect();
    let at = if path.is_empty() {
        String::new()
    } else {
        format!("{}: ", path.trim_end_matches('.'))
    };
    let what = format!(
        "{at}TFJob {name}: only some replicas would get tlc ({}); left without: {}",
        injected.join(", "),
        left.join("; ")
    );
    if flags.explicit {
        bail!(
            "{what}. In explicit mode every task dials its peers' sidecars, and nothing would \
             listen on the replicas without one: inject all replicas or none (--force does \
             not change this)"
        );
    }
    if !flags.force {
        bail!(
            "{what}. A replica without a sidecar exchanges its tensors uncompressed, and with \
             --mtls not at all (the others' sidecars dial it with TLS): inject all replicas or \
             none (tlc.io/inject: \"false\" on the TFJob), or --force to write it anyway"
        );
    }
    warnings.push(format!("{what} (--force: written anyway)"));
    Ok(())
}

/// Decides for one pod template and injects it if it should be.
fn inject_template(
    found: &mut PodTemplate<'_>,
    sidecar_spec: &spec::Spec,
    flags: &Flags,
    warnings: &mut Vec<String>,
) -> Result<Outcome> {
    let left = |reason: String| Ok(Outcome::Left { reason, warn: true });
    let object_annotations = found
        .object_annotations
        .as_ref()
        .map(|(path, map)| (path.as_str(), map));
    let spec_path = error::join(&found.path, "spec");
    let sidecar_uid = user_of(&sidecar_spec.sidecar);
    let mut sidecar_ports: Vec<u16> = tensorflow::container_ports(&sidecar_spec.sidecar, "")?
        .into_iter()
        .map(|(port, _)| port)
        .collect();
    sidecar_ports.push(crate::admin::DEFAULT_PORT);
    let decided = {
        let annotations = Annotations::new(found.template, &found.path, object_annotations)?;
        let spec = match found.template.get("spec") {
            Some(Value::Mapping(spec)) => spec,
            Some(other) => {
                return Err(ManifestError::expected(spec_path, "a mapping", other).into())
            }
            None => return Err(ManifestError::new(spec_path, "missing: no pod spec here").into()),
        };
        if spec.get("hostNetwork") == Some(&Value::Bool(true)) {
            // tlc-init would rewrite the node's own iptables rules.
            return left(
                "a pod on the host's network (hostNetwork: true) cannot have a sidecar".into(),
            );
        }
        if let Some(uid) = sidecar_uid.filter(|uid| runs_as(spec, *uid)) {
            return left(format!(
                "it runs as UID {uid}, the sidecar's, whose connections the redirect lets \
                 through: nothing would be compressed"
            ));
        }
        // Every port the pod's own containers declare (tlc's left out).
        let used = tensorflow::declared_ports(
            spec,
            &spec_path,
            &["containers", "initContainers"],
            is_tlc,
        )?;
        if let Some(port) = used.into_iter().find(|port| sidecar_ports.contains(port)) {
            return left(format!(
                "a container uses port {port}, which the sidecar listens on"
            ));
        }
        if found.tf_job.as_ref().is_some_and(|job| !job.has_ps) && !flags.force {
            return left(
                "the TFJob has no PS replica, and tlc compresses what parameter servers \
                 exchange (--force injects it anyway)"
                    .into(),
            );
        }
        let tf = tensorflow::inspect(spec, &spec_path, found.tf_job.is_some())?;
        settings::resolve(flags, &annotations, spec, &spec_path, tf.as_ref())?
    };
    let mut settings = match decided {
        Decision::Inject(settings) => settings,
        Decision::OptedOut => {
            return Ok(Outcome::Left {
                reason: format!("{}: \"false\"", settings::INJECT),
                warn: false,
            })
        }
        Decision::NotTensorflow => {
            return left(
                "nothing says it runs TensorFlow (a TFJob, a container named tensorflow, \
                 TF_CONFIG, --ps_hosts/--worker_hosts, a port named tfjob-port); --tf-ports, \
                 tlc.io/tf-ports or --force injects it"
                    .into(),
            )
        }
    };
    if flags.explicit {
        let Some(job) = &found.tf_job else {
            return left(
                "explicit mode (--explicit) takes TFJob replicas only, whose cluster the \
                 manifest names"
                    .into(),
            );
        };
        let routes = explicit::routes(job, settings.tf_ports[0])
            .map_err(|e| ManifestError::new(spec_path.clone(), e))?;
        settings.routes = Some(routes);
    }
    let additions = sidecar::additions(sidecar_spec, &settings)?;
    warnings.extend(mesh::turned_off(found.template, &found.path, &additions));
    let mut changes = Changes::default();
    pod::inject(found.template, &found.path, &additions, &mut changes)?;
    if flags.explicit {
        if let Some(Value::Mapping(spec)) = found.template.get_mut("spec") {
            explicit::wrap_tensorflow(spec, &spec_path)?;
            changes
                .wrapped
                .push(explicit::WRAPPED_CONTAINER.to_string());
        }
    }
    pod::write_record(found.template, &found.path, &changes)?;
    Ok(Outcome::Injected)
}

/// The `runAsUser` of a container's or pod's `securityContext`.
fn user_of(object: &Mapping) -> Option<u64> {
    object.get("securityContext")?.get("runAsUser")?.as_u64()
}

/// Whether a container is one of tlc's own (on a pod injected before).
fn is_tlc(container: &Mapping) -> bool {
    let name = container.get("name").and_then(Value::as_str);
    name == Some(spec::INIT_NAME) || name == Some(spec::SIDECAR_NAME)
}

/// Whether the pod, or any of its own containers, runs as `uid`.
fn runs_as(spec: &Mapping, uid: u64) -> bool {
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|key| spec.get(*key)?.as_sequence())
        .flatten()
        .filter_map(Value::as_mapping)
        .filter(|c| !is_tlc(c));
    user_of(spec) == Some(uid) || containers.filter_map(user_of).any(|u| u == uid)
}
