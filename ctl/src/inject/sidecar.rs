//! What tlc adds to one pod: the sidecar spec ([`super::spec`], the file the
//! Kustomize overlays apply too) with the pod's own settings on top: the
//! image, the TensorFlow ports `tlc-init` redirects, the codec, sparsity and
//! TLS variables of `tlc-sidecar`, and the TLS volume with `--mtls` only
//! (required then, instead of the spec's optional one).

use anyhow::{bail, Result};
use yaml_serde::{Mapping, Value};

use super::explicit;
use super::mapping::{insert_after, name_of};
use super::settings::{join_ports, PodSettings};
use super::spec::{Spec, TLS_VOLUME};

/// Everything one pod gets, built from the spec and its settings.
#[derive(Debug, Clone)]
pub struct Additions {
    /// `tlc-init`; `None` in explicit mode, which redirects nothing.
    pub init: Option<Value>,
    /// `tlc-sidecar`.
    pub sidecar: Value,
    /// The volumes the two mount.
    pub volumes: Vec<Value>,
    /// The annotations set on the pod template, in order.
    pub annotations: Mapping,
    /// The labels set on the pod template, in order.
    pub labels: Mapping,
    /// The pod's `terminationGracePeriodSeconds` is raised to at least this.
    pub grace_seconds: u64,
}

/// The environment of `tlc-sidecar` for one pod, after the spec's own.
fn env(settings: &PodSettings) -> Vec<(&'static str, String)> {
    let mut env = Vec::new();
    if let Some(codec) = &settings.codec {
        env.push(("TLC_POLICY__PUSH__CODEC", codec.clone()));
        env.push(("TLC_POLICY__PULL__CODEC", codec.clone()));
    }
    if let Some(sparsity) = &settings.sparsity {
        env.push(("TLC_POLICY__PUSH__SPARSITY", sparsity.clone()));
        env.push(("TLC_POLICY__PULL__SPARSITY", sparsity.clone()));
    }
    if settings.mtls {
        env.push(("TLC_TLS__MODE", "mutual".to_string()));
        env.push(("TLC_TLS__CERT", "/etc/tlc/tls/tls.crt".to_string()));
        env.push(("TLC_TLS__KEY", "/etc/tlc/tls/tls.key".to_string()));
        env.push(("TLC_TLS__CA", "/etc/tlc/tls/ca.crt".to_string()));
    }
    env
}

/// The `tlc-init` container for a pod.
pub fn init_container(spec: &Spec, settings: &PodSettings) -> Result<Value> {
    let mut init = spec.init.clone();
    insert_after(&mut init, "name", "image", settings.image.as_str().into());
    match init.get_mut("command") {
        Some(Value::Sequence(command)) if spec.tf_ports_at < command.len() => {
            command[spec.tf_ports_at] = join_ports(&settings.tf_ports).into();
        }
        _ => bail!("the sidecar spec's tlc-init has no --tf-ports argument (a bug in tlcctl)"),
    }
    Ok(Value::Mapping(init))
}

/// The `tlc-sidecar` container for a pod.
pub fn sidecar_container(spec: &Spec, settings: &PodSettings) -> Result<Value> {
    let mut sidecar = spec.sidecar.clone();
    insert_after(
        &mut sidecar,
        "name",
        "image",
        settings.image.as_str().into(),
    );
    let mut added: Vec<Value> = env(settings)
        .into_iter()
        .map(|(name, value)| {
            let mut var = Mapping::new();
            var.insert("name".into(), name.into());
            var.insert("value".into(), value.into());
            Value::Mapping(var)
        })
        .collect();
    if let Some(routes) = &settings.routes {
        added.push(explicit::namespace_env());
        let Some(Value::Sequence(args)) = sidecar.get_mut("args") else {
            bail!("the sidecar spec's tlc-sidecar has no args list (a bug in tlcctl)");
        };
        for route in routes {
            args.extend(["--route".into(), route.as_str().into()]);
        }
    }
    if !added.is_empty() {
        if matches!(sidecar.get("env"), None | Some(Value::Null)) {
            insert_after(&mut sidecar, "args", "env", Value::Sequence(Vec::new()));
        }
        let Some(Value::Sequence(list)) = sidecar.get_mut("env") else {
            bail!("the sidecar spec's tlc-sidecar env is not a list (a bug in tlcctl)");
        };
        list.extend(added);
    }
    if !settings.mtls {
        if let Some(Value::Sequence(mounts)) = sidecar.get_mut("volumeMounts") {
            mounts.retain(|m| name_of(m) != Some(TLS_VOLUME));
        }
    }
    Ok(Value::Mapping(sidecar))
}

/// The volumes a pod needs: the spec's, without [`TLS_VOLUME`] unless the
/// pod speaks mutual TLS, when the Secret must be there (`optional: false`).
pub fn volumes(spec: &Spec, settings: &PodSettings) -> Vec<Value> {
    let mut volumes = spec.volumes.clone();
    if !settings.mtls {
        volumes.retain(|v| name_of(v) != Some(TLS_VOLUME));
        return volumes;
    }
    for volume in &mut volumes {
        if name_of(volume) != Some(TLS_VOLUME) {
            continue;
        }
        if let Some(Value::Mapping(secret)) = volume.get_mut("secret") {
            secret.insert("optional".into(), false.into());
        }
    }
    volumes
}

/// Everything one pod gets.
pub fn additions(spec: &Spec, settings: &PodSettings) -> Result<Additions> {
    Ok(Additions {
        // Explicit mode redirects nothing.
        init: match settings.routes {
            None => Some(init_container(spec, settings)?),
            Some(_) => None,
        },
        sidecar: sidecar_container(spec, settings)?,
        volumes: volumes(spec, settings),
        annotations: spec.annotations.clone(),
        labels: spec.labels.clone(),
        grace_seconds: spec.grace_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::super::spec::{self, INIT_NAME, SIDECAR_NAME};
    use super::*;

    fn settings(mtls: bool) -> PodSettings {
        PodSettings {
            image: "registry.example.com/tlcd:9".to_string(),
            tf_ports: vec![2222, 2223],
            codec: Some("int8".to_string()),
            sparsity: None,
            routes: None,
            mtls,
        }
    }

    #[test]
    fn the_pods_settings_go_on_top_of_the_spec() {
        let spec = spec::get().expect("built-in spec");
        let s = settings(true);
        let init = init_container(spec, &s).expect("init");
        assert_eq!(init["name"], Value::from(INIT_NAME));
        assert_eq!(init["image"], Value::from("registry.example.com/tlcd:9"));
        assert_eq!(init["command"][3], Value::from("2222,2223"));
        let sidecar = sidecar_container(spec, &s).expect("sidecar");
        assert_eq!(sidecar["name"], Value::from(SIDECAR_NAME));
        assert_eq!(sidecar["env"][2]["value"], Value::from("int8"));
        assert_eq!(sidecar["volumeMounts"][2]["name"], Value::from(TLS_VOLUME));
        let volumes = volumes(spec, &s);
        assert_eq!(volumes.len(), 3);
        assert_eq!(volumes[2]["secret"]["optional"], Value::from(false));
    }

    #[test]
    fn without_mtls_there_is_no_tls_volume_or_mount() {
        let spec = spec::get().expect("built-in spec");
        let s = settings(false);
        let sidecar = sidecar_container(spec, &s).expect("sidecar");
        let mounts = sidecar["volumeMounts"].as_sequence().expect("mounts");
        assert!(mounts.iter().all(|m| name_of(m) != Some(TLS_VOLUME)));
        assert!(volumes(spec, &s)
            .iter()
            .all(|v| name_of(v) != Some(TLS_VOLUME)));
        // The spec itself is left as it was.
        assert!(spec.volumes.iter().any(|v| name_of(v) == Some(TLS_VOLUME)));
    }
}
