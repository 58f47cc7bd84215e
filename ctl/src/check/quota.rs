//! The namespace's ResourceQuotas against tlc's containers. A quota that
//! constrains `limits.cpu` (or memory, or requests) refuses every pod with
//! a container that sets none, unless a LimitRange fills it in; and each
//! pod's tlc-sidecar adds its limits to what the quota has left.
//!
//! tlc's resources are read from the sidecar spec built into tlcctl, the
//! same file `inject` and the Kustomize component apply, so that this check
//! cannot drift from what is injected.

use anyhow::{Context, Result};
use serde_json::Value;

use super::{forbidden, list, quantity, Line, Verdict};

/// The sidecar spec, as `inject` builds it in (ctl/src/inject/spec.rs).
const SIDECAR_SPEC: &str = include_str!("../../../deploy/k8s/components/sidecar/sidecar.yaml");

/// The quota keys that constrain a container's cpu or memory: each with
/// whether it counts limits (else requests), and the resource. A bare
/// `cpu` or `memory` is requests.
const COMPUTE: [(&str, bool, &str); 6] = [
    ("limits.cpu", true, "cpu"),
    ("limits.memory", true, "memory"),
    ("requests.cpu", false, "cpu"),
    ("requests.memory", false, "memory"),
    ("cpu", false, "cpu"),
    ("memory", false, "memory"),
];

/// The container every injected pod has; `tlc-init` is left out by
/// explicit mode and ends before the pod's containers start, so only the
/// sidecar adds to a running pod's total.
const SIDECAR: &str = "tlc-sidecar";

/// tlc's containers (`tlc-init`, `tlc-sidecar`) as the spec has them.
fn containers() -> Result<Vec<Value>> {
    let spec: Value =
        yaml_serde::from_str(SIDECAR_SPEC).context("the built-in sidecar spec is not YAML")?;
    Ok(spec["template"]["spec"]["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// What a container sets for a quota key: a limit for `limits.*`; for a
/// request, its request, else its limit (which Kubernetes copies). YAML
/// may write a whole number of cores bare (`cpu: 2`).
fn value_of(container: &Value, limits: bool, resource: &str) -> Option<String> {
    let resources = &container["resources"];
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let limit = text(&resources["limits"][resource]);
    if limits {
        limit
    } else {
        text(&resources["requests"][resource]).or(limit)
    }
}

/// One line per ResourceQuota that constrains cpu or memory, else one
/// saying none does.
pub(super) fn check(namespace: &str) -> Result<Vec<Line>> {
    let quotas = match list(namespace, "resourcequota")? {
        Ok(quotas) => quotas,
        Err(message) => {
            let what = format!("ResourceQuotas in {namespace}");
            return Ok(vec![forbidden(&what, &message)]);
        }
    };
    let ours = containers()?;
    judge(namespace, &quotas, &ours, &mut || {
        limit_range_defaults(namespace)
    })
}

/// The (limits?, resource) pairs a Container LimitRange gives defaults
/// for, or kubectl's message where LimitRanges are forbidden.
type Defaults = std::result::Result<Vec<(bool, String)>, String>;

/// The lines for a ResourceQuota `list` against tlc's containers `ours`;
/// `fetch` reads the LimitRanges' defaults, only when they matter.
fn judge(
    namespace: &str,
    list: &Value,
    ours: &[Value],
    fetch: &mut dyn FnMut() -> Result<Defaults>,
) -> Result<Vec<Line>> {
    let mut defaults = None;
    let mut lines = Vec::new();
    for quota in list["items"].as_array().into_iter().flatten() {
        let name = quota["metadata"]["name"].as_str().unwrap_or("?");
        let hard = if quota["status"]["hard"].is_object() {
            &quota["status"]["hard"]
        } else {
            &quota["spec"]["hard"]
        };
        let keys: Vec<_> = COMPUTE
            .iter()
            .filter(|(key, _, _)| hard[*key].is_string())
            .collect();
        if keys.is_empty() {
            continue;
        }
        let shown = keys.iter().map(|k| k.0).collect::<Vec<_>>().join(", ");
        let head = format!("ResourceQuota {name} in {namespace} constrains {shown}");
        let mut lacking = Vec::new();
        for &&(key, limits, resource) in &keys {
            let without: Vec<&str> = ours
                .iter()
                .filter(|c| value_of(c, limits, resource).is_none())
                .filter_map(|c| c["name"].as_str())
                .collect();
            if !without.is_empty() {
                lacking.push((key, limits, resource, without.join(" and ")));
            }
        }
        if lacking.is_empty() {
            lines.push(room(&head, quota, &keys, ours));
            continue;
        }
        if defaults.is_none() {
            defaults = Some(fetch()?);
        }
        let mut unfilled = Vec::new();
        for (key, limits, resource, without) in lacking {
            let filled = match &defaults {
                Some(Ok(found)) => found.iter().any(|(l, r)| *l == limits && r == resource),
                _ => false,
            };
            if !filled {
                unfilled.push(format!("{without} set no {key}"));
            }
        }
        lines.push(match (unfilled.is_empty(), &defaults) {
            (true, _) => (
                Verdict::Ok,
                format!("{head}: a LimitRange's defaults fill in what tlc's containers leave out"),
            ),
            (false, Some(Err(message))) => (
                Verdict::Warn,
                format!(
                    "{head}: {} (the sidecar spec), and LimitRanges cannot be read ({message}): \
                     unless one fills it in, the quota refuses the pods",
                    unfilled.join("; ")
                ),
            ),
            (false, _) => (
                Verdict::Fail,
                format!(
                    "{head}: {} (the sidecar spec), so the quota refuses the pods: add a \
                     LimitRange with defaults, or set them in the injected manifests",
                    unfilled.join("; ")
                ),
            ),
        });
    }
    if lines.is_empty() {
        lines.push((
            Verdict::Ok,
            format!("no ResourceQuota in {namespace} constrains cpu or memory"),
        ));
    }
    Ok(lines)
}

/// The line for a quota tlc's containers satisfy: what the sidecar
/// carries, and how many more sidecars the quota's room takes.
fn room(head: &str, quota: &Value, keys: &[&(&str, bool, &str)], ours: &[Value]) -> Line {
    let sidecar = ours.iter().find(|c| c["name"] == SIDECAR);
    let mut carried = Vec::new();
    let mut fits: Option<f64> = None;
    for &&(key, limits, resource) in keys {
        let Some(per) = sidecar.and_then(|s| value_of(s, limits, resource)) else {
            continue;
        };
        carried.push(format!("{key} {per}"));
        let hard = quota["status"]["hard"][key]
            .as_str()
            .and_then(quantity::parse);
        let used = quota["status"]["used"][key]
            .as_str()
            .and_then(quantity::parse);
        if let (Some(hard), Some(used), Some(per)) = (hard, used, quantity::parse(&per)) {
            if per > 0.0 {
                // A hair over the quotient, so that 2Gi of room for 1Gi
                // sidecars is 2 whatever the float rounding.
                let n = ((hard - used).max(0.0) / per + 1e-9).floor();
                fits = Some(fits.map_or(n, |m: f64| m.min(n)));
            }
        }
    }
    let carries = format!(
        "{head}: tlc's containers set them (tlc-sidecar: {} per pod)",
        carried.join(", ")
    );
    match fits {
        Some(n) if n < 1.0 => (
            Verdict::Warn,
            format!("{carries}; the quota has no room left for one more"),
        ),
        Some(n) => (
            Verdict::Ok,
            format!("{carries}; room for {n} more beside what runs"),
        ),
        None => (Verdict::Ok, carries),
    }
}

/// What the namespace's Container LimitRanges give defaults for.
fn limit_range_defaults(namespace: &str) -> Result<Defaults> {
    let list = match list(namespace, "limitrange")? {
        Ok(list) => list,
        Err(message) => return Ok(Err(message)),
    };
    let mut found = Vec::new();
    let ranges = list["items"].as_array().into_iter().flatten();
    for limit in ranges.flat_map(|r| r["spec"]["limits"].as_array().into_iter().flatten()) {
        if limit["type"] != "Container" {
            continue;
        }
        // A default limit is also the default request, as the API server
        // applies them.
        for (key, limits) in [
            ("default", true),
            ("default", false),
            ("defaultRequest", false),
        ] {
            if let Some(map) = limit[key].as_object() {
                found.extend(map.keys().map(|r| (limits, r.clone())));
            }
        }
    }
    Ok(Ok(found))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// tlc's containers as a spec without cpu limits had them.
    fn without_cpu_limits() -> Vec<Value> {
        let resources = json!({"requests": {"cpu": "100m", "memory": "256Mi"},
                               "limits": {"memory": "1Gi"}});
        vec![
            json!({"name": "tlc-init", "resources": resources}),
            json!({"name": "tlc-sidecar", "resources": resources}),
        ]
    }

    fn quotas() -> Value {
        json!({"items": [{"metadata": {"name": "compute"},
                          "status": {"hard": {"limits.cpu": "8", "limits.memory": "16Gi"},
                                     "used": {"limits.cpu": "1", "limits.memory": "2Gi"}}}]})
    }

    fn judged(defaults: Defaults) -> Line {
        let mut fetch = || Ok(defaults.clone());
        let lines = judge("training", &quotas(), &without_cpu_limits(), &mut fetch).unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        lines[0].clone()
    }

    #[test]
    fn a_limit_the_spec_lacks_fails_unless_a_limit_range_fills_it_in() {
        let (verdict, line) = judged(Ok(Vec::new()));
        assert_eq!(verdict, Verdict::Fail, "{line}");
        assert!(
            line.contains("tlc-init and tlc-sidecar set no limits.cpu (the sidecar spec)"),
            "{line}"
        );
        assert!(!line.contains("limits.memory (the"), "{line}");

        let (verdict, line) = judged(Ok(vec![(true, "cpu".to_string())]));
        assert_eq!(verdict, Verdict::Ok, "{line}");
        assert!(line.contains("a LimitRange's defaults fill in"), "{line}");

        // A default request is no limit.
        let (verdict, _) = judged(Ok(vec![(false, "cpu".to_string())]));
        assert_eq!(verdict, Verdict::Fail);

        let (verdict, line) = judged(Err("limitranges is forbidden".to_string()));
        assert_eq!(verdict, Verdict::Warn, "{line}");
        assert!(line.contains("LimitRanges cannot be read (limitranges is forbidden)"));
    }

    #[test]
    fn limit_ranges_are_read_only_when_they_matter() {
        let carried = vec![json!({"name": "tlc-sidecar",
            "resources": {"limits": {"cpu": 2, "memory": "1Gi"}}})];
        let mut fetch = || -> Result<Defaults> { panic!("LimitRanges read") };
        let lines = judge("training", &quotas(), &carried, &mut fetch).unwrap();
        // 7 cores and 14Gi left: 3 sidecars of 2 cores.
        assert_eq!(
            lines,
            vec![(
                Verdict::Ok,
                "ResourceQuota compute in training constrains limits.cpu, limits.memory: tlc's \
                 containers set them (tlc-sidecar: limits.cpu 2, limits.memory 1Gi per pod); \
                 room for 3 more beside what runs"
                    .to_string()
            )]
        );
    }
}
