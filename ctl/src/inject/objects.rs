//! Finding the pod templates in a Kubernetes object, by its kind. Objects
//! of a kind not known here (a PyTorchJob, an MPIJob) are searched for
//! anything shaped like a pod template, so that they are judged (and
//! warned about) as a Deployment would be rather than passed over in
//! silence; objects without one pass through unchanged.

use yaml_serde::{Mapping, Value};

use super::error::{index, join, ManifestError};

/// Kinds whose pod template is at `spec.template`.
const TEMPLATE_IN_SPEC: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "ReplicationController",
    "Job",
];

/// One pod template found in a document.
pub struct PodTemplate<'a> {
    /// Where it is, from the top of the document (`""` for a bare Pod).
    pub path: String,
    /// The template: a mapping with `metadata` and `spec`.
    pub template: &'a mut Mapping,
    /// The annotations of the object that holds it, with their path
    /// (`None` for a bare Pod, whose template is the object).
    pub object_annotations: Option<(String, Mapping)>,
    /// For a TFJob replica's template: whether the job has parameter
    /// servers (a `PS` replica), without which tlc has nothing to do.
    pub tf_job: Option<TfJob>,
}

/// What a TFJob replica's template knows of its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TfJob {
    /// The job has a `PS` replica.
    pub has_ps: bool,
    /// The TFJob's name (`metadata.name`), which the operator's Service of
    /// each task is named after (`NAME-ps-0`).
    pub name: String,
    /// The tasks of the cluster the training operator writes into
    /// `TF_CONFIG`: each replica type but `Evaluator`, lowercase (`ps`,
    /// `worker`, `chief`), with its number of replicas, sorted by name.
    pub cluster: Vec<(String, u64)>,
}

/// One document as a Kubernetes object: `None` for an empty document,
/// an error for anything that is not a mapping.
pub fn object_of(document: &mut Value) -> Result<Option<&mut Mapping>, ManifestError> {
    match document {
        Value::Null => Ok(None),
        Value::Mapping(object) => Ok(Some(object)),
        other => Err(ManifestError::expected(
            "",
            "a Kubernetes object (a mapping)",
            other,
        )),
    }
}

/// Every pod template in `object` (a document, or an item of a `List`),
/// which is at `path`.
pub fn pod_templates<'a>(
    object: &'a mut Mapping,
    path: &str,
) -> Result<Vec<PodTemplate<'a>>, ManifestError> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if kind == "Pod" {
        return Ok(vec![PodTemplate {
            path: path.to_string(),
            template: object,
            object_annotations: None,
            tf_job: None,
        }]);
    }
    if kind.ends_with("List") && object.contains_key("items") {
        return list_items(object, path);
    }
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if kind == "Job" && api_version.starts_with("batch.volcano.sh/") {
        return volcano_job(object, path);
    }
    if kind == "Experiment" && api_version.starts_with("kubeflow.org/") {
        return katib_experiment(object, path);
    }
    let at: &[&str] = match kind.as_str() {
        k if TEMPLATE_IN_SPEC.contains(&k) => &["spec", "template"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template"],
        "TFJob" => return tf_job(object, path),
        _ => return any_kind(object, path),
    };
    let annotations = object_annotations(object, path)?;
    let (template, template_path) = descend(object, path, at)?;
    Ok(vec![PodTemplate {
        path: template_path,
        template,
        object_annotations: annotations,
        tf_job: None,
    }])
}

/// How deep below an object of an unknown kind pod templates are looked
/// for (a PyTorchJob's are at `spec.pytorchReplicaSpecs.Master.template`).
const SEARCH_DEPTH: usize = 8;

/// An object of a kind not known here: every `template` below its `spec`
/// that holds a pod spec (`spec.containers`).
fn any_kind<'a>(
    object: &'a mut Mapping,
    path: &str,
) -> Result<Vec<PodTemplate<'a>>, ManifestError> {
    let annotations = object_annotations(object, path)?;
    let mut templates = Vec::new();
    if let Some(Value::Mapping(spec)) = object.get_mut("spec") {
        search(spec, &join(path, "spec"), 0, &mut templates);
    }
    Ok(templates
        .into_iter()
        .map(|(path, template)| PodTemplate {
            path,
            template,
            object_annotations: annotations.clone(),
            tf_job: None,
        })
        .collect())
}

/// Collects the pod templates below `map` (at `path`), `depth` levels down.
fn search<'a>(
    map: &'a mut Mapping,
    path: &str,
    depth: usize,
    found: &mut Vec<(String, &'a mut Mapping)>,
) {
    if depth > SEARCH_DEPTH {
        return;
    }
    for (key, value) in map.iter_mut() {
        let Some(key) = key.as_str() else {
            continue;
        };
        let child = join(path, key);
        match value {
            Value::Mapping(inner) => {
                let pod_template = key == "template"
                    && inner
                        .get("spec")
                        .and_then(|s| s.get("containers"))
                        .is_some_and(Value::is_sequence);
                if pod_template {
                    found.push((child, inner));
                } else {
                    search(inner, &child, depth + 1, found);
                }
            }
            Value::Sequence(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    if let Value::Mapping(inner) = item {
                        search(inner, &index(&child, i), depth + 1, found);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A Volcano `batch.volcano.sh` Job: one template per task under
/// `spec.tasks`.
fn volcano_job<'a>(
    object: &'a mut Mapping,
    path: &str,
) -> Result<Vec<PodTemplate<'a>>, ManifestError> {
    let annotations = object_annotations(object, path)?;
    let (spec, spec_path) = descend(object, path, &["spec"])?;
    let tasks_path = join(&spec_path, "tasks");
    let tasks = match spec.get_mut("tasks") {
        Some(Value::Sequence(tasks)) => tasks,
        Some(other) => return Err(ManifestError::expected(tasks_path, "a list", other)),
        None => {
            return Err(ManifestError::new(
                tasks_path,
                "missing: a Volcano Job's tasks",
            ))
        }
    };
    let mut found = Vec::new();
    for (i, task) in tasks.iter_mut().enumerate() {
        let task_path = index(&tasks_path, i);
        let Value::Mapping(task) = task else {
            return Err(ManifestError::expected(task_path, "a mapping", task));
        };
        let (template, template_path) = descend(task, &task_path, &["template"])?;
        found.push(PodTemplate {
            path: template_path,
            template,
            object_annotations: annotations.clone(),
            tf_job: None,
        });
    }
    Ok(found)
}

/// A Katib Experiment: its trials are made from
/// `spec.trialTemplate.trialSpec`, an object of its own (a TFJob, a Job),
/// whose pod templates are injected where they are.
fn katib_experiment<'a>(
    object: &'a mut Mapping,
    path: &str,
) -> Result<Vec<PodTemplate<'a>>, ManifestError> {
    let (trial, trial_path) = descend(object, path, &["spec", "trialTemplate", "trialSpec"])
        .map_err(|e| {
            ManifestError::new(
                join(&join(path, "spec"), "trialTemplate"),
                format!("{e}: only an Experiment whose trials are written in it (trialSpec) can be injected; a trial template from a ConfigMap cannot"),
            )
        })?;
    pod_templates(trial, &trial_path)
}

/// The pod templates of every item of a `List`.
fn list_items<'a>(
    object: &'a mut Mapping,
    path: &str,
) -> Result<Vec<PodTemplate<'a>>, ManifestError> {
    let items_path = join(path, "items");
    let items = match object.get_mut("items") {
        Some(Value::Sequence(items)) => items,
        Some(Value::Null) | None => return Ok(Vec::new()),
        Some(other) => return Err(ManifestError::expected(items_path, "a list", other)),
    };
    let mut found = Vec::new();
    for (i, item) in items.iter_mut().enumerate() {
        let item_path = index(&items_path, i);
        match item {
            Value::Mapping(item) => found.extend(pod_templates(item, &item_path)?),
            other => {
                return Err(ManifestError::expected(
                    item_path,
                    "an object (a mapping)",
                    other,
                ))
            }
        }
    }
    Ok(found)
}

/// A Kubeflow TFJob: one template per role under `spec.tfReplicaSpecs`.
fn tf_job<'a>(object: &'a mut Mapping, path: &str) -> Result<Vec<PodTemplate<'a>>, ManifestError> {
    let annotations = object_annotations(object, path)?;
    let job_name = object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let (roles, roles_path) = descend(object, path, &["spec", "tfReplicaSpecs"])?;
    let has_ps = roles
        .keys()
        .filter_map(Value::as_str)
        .any(|role| role.eq_ignore_ascii_case("ps"));
    let mut cluster: Vec<(String, u64)> = roles
        .iter()
        .filter_map(|(role, spec)| {
            let role = role.as_str()?.to_lowercase();
            let replicas = spec.get("replicas").and_then(Value::as_u64).unwrap_or(1);
            (role != "evaluator").then_some((role, replicas))
        })
        .collect();
    cluster.sort();
    let job = TfJob {
        has_ps,
        name: job_name,
        cluster,
    };
    let mut found = Vec::new();
    for (role, spec) in roles.iter_mut() {
        let Some(role) = role.as_str() else {
            return Err(ManifestError::new(
                roles_path,
                "a role name is not a string",
            ));
        };
        let role_path = join(&roles_path, role);
        let Value::Mapping(spec) = spec else {
            return Err(ManifestError::expected(role_path, "a mapping", spec));
        };
        let (template, template_path) = descend(spec, &role_path, &["template"])?;
        found.push(PodTemplate {
            path: template_path,
            template,
            object_annotations: annotations.clone(),
            tf_job: Some(job.clone()),
        });
    }
    Ok(found)
}

/// `metadata.annotations` of an object, copied, with its path.
fn object_annotations(
    object: &Mapping,
    path: &str,
) -> Result<Option<(String, Mapping)>, ManifestError> {
    let metadata_path = join(path, "metadata");
    let annotations_path = join(&metadata_path, "annotations");
    match object.get("metadata") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Mapping(metadata)) => match metadata.get("annotations") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Mapping(a)) => Ok(Some((annotations_path, a.clone()))),
            Some(other) => Err(ManifestError::expected(
                annotations_path,
                "a mapping",
                other,
            )),
        },
        Some(other) => Err(ManifestError::expected(metadata_path, "a mapping", other)),
    }
}

/// The mapping at `keys` below `map` (which is at `path`), and its path.
fn descend<'a>(
    map: &'a mut Mapping,
    path: &str,
    keys: &[&str],
) -> Result<(&'a mut Mapping, String), ManifestError> {
    let mut map = map;
    let mut path = path.to_string();
    for key in keys {
        path = join(&path, key);
        map = match map.get_mut(*key) {
            Some(Value::Mapping(inner)) => inner,
            Some(other) => return Err(ManifestError::expected(path, "a mapping", other)),
            None => return Err(ManifestError::new(path, "missing")),
        };
    }
    Ok((map, path))
}
