//! `tlcctl uninject`: the manifests as they were before `tlcctl inject`,
//! as `linkerd uninject` does: tlc's containers and volumes out of every
//! pod template, and what inject changed (its record on each pod) put back.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use yaml_serde::Value;

use super::error;
use super::objects;
use super::remove::{self, Removed};
use crate::admin::Format;

/// Arguments of `uninject`.
#[derive(Debug, Args)]
#[command(after_help = "\
Every pod template loses tlc-init, tlc-sidecar and tlc's volumes, and gets
back what inject changed, as inject recorded it on the pod (the annotation
tlc.io/injected-changes): the annotations and labels it set (a user's
sidecar.istio.io/inject among them), terminationGracePeriodSeconds, a volume
of the user's it replaced, explicit mode's wrapper around the tensorflow
command. A tlc.io/inject: \"false\" written after injecting stays. A pod with
tlc but no record (the Kustomize Component's, an older tlcctl's) loses the
containers and volumes only, with a warning. To take tlc off a running job,
apply the output (a TFJob: delete and create it again; its pods do not
change in place).")]
pub struct UninjectArgs {
    /// Kubernetes YAML or JSON that `tlcctl inject` wrote; `-` reads stdin.
    #[arg(value_name = "FILE")]
    input: Option<PathBuf>,
}

/// Runs `uninject`. `format` is the global `-o` (YAML when not given).
pub fn run(args: &UninjectArgs, format: Option<Format>, verbose: bool) -> Result<()> {
    let json = super::wants_json(format, "uninject")?;
    let (name, text) = super::read_input(args.input.as_deref())?;
    let mut documents =
        super::documents::parse(&text).with_context(|| format!("cannot read {name}"))?;
    let mut removed = 0usize;
    let mut warnings = Vec::new();
    for (i, document) in documents.iter_mut().enumerate() {
        let label = format!("{name}: document {}{}", i + 1, super::describe(document));
        let mut found = Vec::new();
        removed += uninject_document(document, &mut found).context(label.clone())?;
        warnings.extend(found.into_iter().map(|w| format!("{label}: {w}")));
    }
    super::write_documents(&documents, json)?;
    for warning in warnings {
        eprintln!("tlcctl: warning: {warning}");
    }
    if verbose {
        eprintln!("tlcctl: took tlc out of {removed} pod template(s) from {name}");
    }
    Ok(())
}

/// Takes tlc out of every pod template of one document; returns how many
/// had it.
fn uninject_document(document: &mut Value, warnings: &mut Vec<String>) -> Result<usize> {
    let Some(object) = objects::object_of(document)? else {
        return Ok(0);
    };
    let mut removed = 0;
    for found in objects::pod_templates(object, "")? {
        match remove::take_out(found.template, &found.path, false)? {
            Removed::Nothing => {}
            Removed::Restored => removed += 1,
            Removed::WithoutRecord => {
                removed += 1;
                warnings.push(format!(
                    "{}: tlc's containers and volumes taken out; no record of what else inject \
                     changed (the Kustomize Component's or an older tlcctl's): its annotations, \
                     labels and terminationGracePeriodSeconds are left as they are",
                    error::join(&found.path, "spec")
                ));
            }
        }
    }
    Ok(removed)
}
