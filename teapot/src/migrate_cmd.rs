//! `teapot validate --from ingress-nginx`: what becomes of each Ingress
//! written for ingress-nginx when it moves to teapot: served as before,
//! served with a difference, or refused, and why
//! (docs/migrate-from-ingress-nginx.md, whose words it quotes:
//! `teapot_api::migration`). It reads files or a cluster's Ingresses; it
//! needs no LB-cluster state, since it judges what the Ingress says, not
//! whether its hosts are free.

use std::path::PathBuf;

use anyhow::Context;
use k8s_openapi::api::networking::v1::Ingress;
use teapot_api::migration::{FleetSettings, IngressMove, Move, assess_on};

/// The controller an Ingress was written for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    IngressNginx,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Output {
    #[default]
    Text,
    Json,
}

#[derive(clap::Args, Debug)]
pub(crate) struct MigrationArgs {
    /// Say what becomes of each Ingress written for this controller when it moves to teapot (served as before, changed, refused and why), instead of the webhook's check; needs no --manifests or --domain.
    #[arg(long, value_enum)]
    pub(crate) from: Option<Source>,
    /// With --from: read the Ingresses of a cluster (KUBECONFIG, ~/.kube/config or --kubeconfig) instead of files.
    #[arg(long, requires = "from")]
    cluster: bool,
    /// With --cluster: this kubeconfig file.
    #[arg(long, value_name = "FILE", requires = "cluster")]
    kubeconfig: Option<PathBuf>,
    /// With --cluster: only this namespace (default: all).
    #[arg(long, value_name = "NS", requires = "cluster")]
    namespace: Option<String>,
    /// With --from: text for people, json for scripts.
    #[arg(long, value_enum, default_value = "text", requires = "from")]
    output: Output,
    /// With --from: the fleet's `teapot proxy --ssl-redirect-default`; with false, each Ingress whose TLS hosts the fleet then serves over plain HTTP (ingress-nginx redirects them) says so.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set, requires = "from")]
    ssl_redirect_default: bool,
}

impl MigrationArgs {
    /// The fleet settings the Ingresses are judged against.
    fn fleet(&self) -> FleetSettings {
        FleetSettings {
            ssl_redirect_default: self.ssl_redirect_default,
        }
    }
}

/// Prints the verdict on every Ingress; exits 1 when one would be refused,
/// as the webhook's check does.
pub(crate) async fn run(files: &[PathBuf], args: &MigrationArgs) -> anyhow::Result<()> {
    let fleet = args.fleet();
    let assess = |ingress: &Ingress| assess_on(ingress, &fleet);
    let mut moves = Vec::new();
    if args.cluster {
        moves.extend(
            from_cluster(args)
                .await?
                .iter()
                .map(|i| ("cluster".into(), assess(i))),
        );
    }
    for file in files {
        let (label, text) = crate::input::read_input(file)?;
        for ingress in ingresses_in(&text).with_context(|| format!("reading {label}"))? {
            moves.push((label.clone(), assess(&ingress)));
        }
    }
    match args.output {
        Output::Text => print!("{}", text_report(&moves)),
        Output::Json => {
            let list: Vec<serde_json::Value> = moves
                .iter()
                .map(|(source, m)| {
                    serde_json::json!({
                        "source": source,
                        "verdict": m.verdict(),
                        "move": m,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
    }
    let refused = moves
        .iter()
        .filter(|(_, m)| m.verdict() == Move::Refused)
        .count();
    let changed = moves
        .iter()
        .filter(|(_, m)| m.verdict() == Move::WithChanges)
        .count();
    eprintln!(
        "{} Ingresses: {} move as they are, {changed} with changes, {refused} refused",
        moves.len(),
        moves.len() - refused - changed
    );
    if refused > 0 {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        std::process::exit(1);
    }
    Ok(())
}

async fn from_cluster(args: &MigrationArgs) -> anyhow::Result<Vec<Ingress>> {
    let client = crate::agent_cmd::client(args.kubeconfig.as_deref()).await?;
    let api: kube::Api<Ingress> = match &args.namespace {
        Some(ns) => kube::Api::namespaced(client, ns),
        None => kube::Api::all(client),
    };
    let list = api
        .list(&Default::default())
        .await
        .context("listing the cluster's Ingresses")?;
    Ok(list.items)
}

/// Every Ingress in a YAML or JSON text: documents of kind Ingress, and
/// the items of a `List` (what `kubectl get ingress -o yaml` prints).
fn ingresses_in(text: &str) -> anyhow::Result<Vec<Ingress>> {
    let mut out = Vec::new();
    for (i, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = <serde_yaml::Value as serde::Deserialize>::deserialize(document)
            .with_context(|| format!("document {} is not YAML", i + 1))?;
        let items = match value.get("kind").and_then(|k| k.as_str()) {
            Some("List" | "IngressList") => value
                .get("items")
                .and_then(|i| i.as_sequence())
                .cloned()
                .unwrap_or_default(),
            _ => vec![value],
        };
        for item in items {
            if item.get("kind").and_then(|k| k.as_str()) == Some("Ingress") {
                let ingress: Ingress = serde_yaml::from_value(item)
                    .with_context(|| format!("document {} is no valid Ingress", i + 1))?;
                out.push(ingress);
            }
        }
    }
    Ok(out)
}

fn text_report(moves: &[(String, IngressMove)]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (source, m) in moves {
        let verdict = match m.verdict() {
            Move::AsIs => "moves as it is",
            Move::WithChanges => "moves, with changes",
            Move::Refused => "refused until changed",
        };
        let _ = writeln!(out, "Ingress {} ({source}): {verdict}", m.ingress);
        if !m.served.is_empty() {
            let _ = writeln!(out, "  served as before: {}", m.served.join(", "));
        }
        for n in &m.changed {
            let _ = writeln!(out, "  changed: {}: {}", n.what, n.says);
        }
        for n in &m.refused {
            let _ = writeln!(out, "  refused: {}: {}", n.what, n.says);
            if let Some(instead) = &n.instead {
                let _ = writeln!(out, "    instead: {instead}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_documents_are_read_and_other_kinds_skipped() {
        let text = r#"
apiVersion: v1
kind: List
items:
- apiVersion: networking.k8s.io/v1
  kind: Ingress
  metadata: {name: a, namespace: shop}
- apiVersion: v1
  kind: Service
  metadata: {name: s}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: b}
spec: {ingressClassName: teapot}
"#;
        let found = ingresses_in(text).unwrap();
        let names: Vec<_> = found
            .iter()
            .map(|i| i.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        let fleet = FleetSettings::default();
        let moves: Vec<_> = found
            .iter()
            .map(|i| ("f".to_string(), assess_on(i, &fleet)))
            .collect();
        let report = text_report(&moves);
        assert!(
            report.contains("Ingress shop/a (f): moves, with changes\n  changed: spec.ingressClassName: is not set"),
            "{report}"
        );
        assert!(
            report.contains("Ingress default/b (f): moves as it is\n"),
            "{report}"
        );
        assert!(ingresses_in("kind: Ingress\nspec: 3\n").is_err());
    }
}
