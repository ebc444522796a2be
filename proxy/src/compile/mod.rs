//! Compile: [`Store`] + plain inputs -> [`Snapshot`].
//!
//! A pure function (docs/architecture.md, "Who triggers a recompile"):
//! everything it reads is in its arguments, as data. ACME states, domain
//! proofs and the previous L4 holdings are handed over by the loops that
//! own them; what it finds for them (ACME hosts, domain claims, L4
//! holdings) goes back out in the snapshot. It does no I/O and prunes
//! nothing: the endpoint and tenant-gate registries only intern shared
//! per-endpoint and per-tenant state, and the reload loop prunes them
//! after the swap.
//!
//! [`compile_incremental`] names the phases: who is a tenant and which hosts
//! each may route (`bind`); the Gateway API's HTTP and gRPC routes
//! ([`gateway`]), then the Ingresses ([`ingress`]), which ask the Gateway
//! compile for a host one of its routes holds; the ACME hosts; the L4
//! plane ([`l4`]); each Gateway's status rendered once from both planes'
//! parts ([`api_status`]); the custom-domain report; the snapshot.
//!
//! Layout:
//! - [`ingress`]: the Ingress compiler (oldest first: docs/architecture.md,
//!   "Ingress semantics"), its certificates and status, and its ACME hosts.
//! - [`routes`]: host and path matching (docs/architecture.md, "Ingress
//!   semantics").
//! - [`upstream`]: an upstream's endpoints, picked round-robin.
//! - [`certs`]: certificates by host, for the SNI resolver.
//! - [`gateway`]: Gateway API objects into their own route table and
//!   their status (docs/gateway-api.md).
//! - [`l4`]: LoadBalancer Services: allocation and listener table.
//! - [`listeners`]: each Gateway listener classified once for both
//!   planes; [`attach`]: the one parentRef -> listener walk for every
//!   route kind.
//! - [`api_status`]: the Gateway API status report both route compiles
//!   fill (one route report for the five kinds, one outcome per
//!   listener), each Gateway's conditions decided from all its listeners
//!   and rendered to the API types once.
//! - `bind`: which hosts a tenant may route (its subtree, its allowed
//!   domains, proven custom domains) and which Gateways its routes may bind
//!   to, for the Ingress, HTTP and L4 compiles alike.
//! - [`backends`]: the backend resolver (Service and port to upstream),
//!   for the Ingress, Gateway API and L4 compiles alike.
//! - [`policies`]: the policy each route carries (annotation limits, the
//!   tenant's gate).
//! - [`condition`]: the condition every report is written in.
//! - `nginx_variables`: `$name` pieces of an annotation's value, read once
//!   for `upstream-hash-by` and `auth-cache-key`.
//! - [`parts`]: what a compile keeps per tenant namespace for the next
//!   one (incremental recompile: the rule is there).
//! - [`acme`], [`domains`]: what the compile knows of ACME and custom
//!   domains, as data.
//! - [`snapshot`]: what is swapped, and the status report.

pub mod acme;
pub mod api_status;
pub mod attach;
pub mod auth_cache;
pub mod backends;
pub mod bandwidth;
pub mod basic_auth;
pub(crate) mod bind;
#[cfg(test)]
mod bookkeeping_tests;
pub mod buffering;
pub mod certs;
pub mod client_auth;
pub mod condition;
pub mod custom_headers;
pub mod domains;
pub mod endpoint_cells;
pub mod endpoint_sets;
pub mod gateway;
pub mod global_rate;
pub mod hash_by;
pub mod ingress;
pub mod l4;
pub mod listeners;
pub(crate) mod nginx_variables;
pub mod parts;
pub mod passthrough;
pub mod policies;
pub mod proxying;
pub mod response_rewrite;
pub mod retry;
pub mod routes;
pub mod snapshot;
pub mod traffic;
pub mod upstream;
pub mod upstream_http;

use std::sync::Arc;
use std::time::Instant;

use crate::compile::acme::AcmeInputs;
use crate::compile::backends::Resolver;
use crate::compile::certs::CertTable;
use crate::compile::domains::{Claim, ProofResults};
use crate::compile::l4::L4Inputs;
use crate::compile::parts::{CompiledParts, CurrentInputs, Reuse};
use crate::compile::policies::Policies;
use crate::compile::snapshot::{DomainReport, Snapshot, StatusReport, TableSizes};
use crate::live::endpoints::EndpointRegistry;
use crate::live::fairness::TenantGates;
use teapot_model::manifests::Problem;
use teapot_model::store::{FastHashMap, NsName, Store};
use teapot_model::tenancy::Tenancy;

/// Settings that shape a compile but do not come from objects.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// What goes into `status.loadBalancer.ingress` of operator Ingresses
    /// (IPs or hostnames).
    pub status_addresses: Vec<String>,
    /// DOMAIN of `INGRESS.CLUSTER.lb.DOMAIN`.
    pub domain: String,
    /// The LB cluster's own ranges: never a tenant endpoint.
    pub lb_networks: Vec<ipnet::IpNet>,
    /// Custom-domain proof results; `None` routes no custom domain.
    pub proofs: Option<Arc<ProofResults>>,
    /// ACME states; `None`: no ACME, hosts without a Secret get the default
    /// certificate.
    pub acme: Option<AcmeInputs>,
    /// L4 settings and previous holdings; `None` serves no Service at L4.
    pub l4: Option<L4Inputs>,
    /// Per-tenant rate and connection gates, kept across compiles.
    pub tenant_gates: Arc<TenantGates>,
    /// Whether an Ingress's TLS hosts redirect plain HTTP to HTTPS when
    /// neither `ssl-redirect` annotation says (`--ssl-redirect-default`):
    /// on, as ingress-nginx's `ssl-redirect` defaults to true.
    pub ssl_redirect_default: bool,
}

/// Allocator settings (environment variables, read by mimalloc at process
/// start only) under which compiles are fast: the `teapot` binary and the
/// benchmarks run with them.
///
/// mimalloc gives freed memory back to the OS 10 ms after a free. A compile
/// builds the next snapshot while the live one serves, then the old one is
/// dropped: hundreds of MiB at 100k Ingresses, given back and faulted in
/// again, page by page, by the next compile (a fifth of its time on this
/// VM). Keeping freed memory for 10 s costs no more than the peak the
/// process reaches anyway (two snapshots) and returns it when compiles stop.
///
/// mimalloc also asks the kernel for transparent huge pages on its arenas
/// (Debian's default THP mode, `madvise`, grants them): the process's
/// memory then grows and shrinks in 2 MiB pages, which took about 10 MiB
/// at start and made the memory an idle connection costs coarse and larger
/// (docs/capacity.md, "What the proxy keeps"). An edge proxy's working
/// set is small; its memory is what a fleet is sized by.
pub const ALLOCATOR_ENV: [(&str, &str); 2] = [
    ("MIMALLOC_PURGE_DELAY", "10000"),
    ("MIMALLOC_ALLOW_THP", "0"),
];

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            status_addresses: Vec::new(),
            // `*.localhost` resolves to loopback in most resolvers, which is
            // what a local setup without a real domain wants.
            domain: "localhost".into(),
            lb_networks: Vec::new(),
            proofs: None,
            acme: None,
            l4: None,
            tenant_gates: Arc::default(),
            ssl_redirect_default: true,
        }
    }
}

/// Builds a snapshot from a store. `problems` are the loader's, carried into
/// the status report. A full compile: nothing is taken from an earlier one.
pub fn compile(
    store: &Store,
    problems: Vec<Problem>,
    generation: u64,
    options: &CompileOptions,
    registry: &EndpointRegistry,
) -> Snapshot {
    compile_incremental(
        store,
        problems,
        generation,
        options,
        registry,
        &mut CompiledParts::default(),
    )
}

/// [`compile`], taking the backends of namespaces that did not change from
/// the last compile's `parts`, and leaving this one's there for the next
/// ([`parts`] has the rule). The result equals a full compile's.
pub fn compile_incremental(
    store: &Store,
    problems: Vec<Problem>,
    generation: u64,
    options: &CompileOptions,
    registry: &EndpointRegistry,
    parts: &mut CompiledParts,
) -> Snapshot {
    let started = Instant::now();
    // Who is a tenant, and what each may route.
    let tenant_arcs: Vec<&Arc<teapot_api::Tenant>> =
        store.tenants.values().map(|t| &t.object).collect();
    let inputs = CurrentInputs::new(store);
    // Taken out, so that what is handed on whole can be moved out of it.
    let previous = std::mem::take(parts);
    let reuse = Reuse::new(&previous, &inputs, &tenant_arcs, &options.lb_networks);
    let tenant_list: Vec<&teapot_api::Tenant> = tenant_arcs.iter().map(|t| &***t).collect();
    // Every Tenant's grants and networks: the last compile's when it read
    // the same Tenants, since building them again costs every Tenant's
    // domains and networks whatever changed.
    let holdings = previous
        .holdings_for(&tenant_arcs, &options.lb_networks)
        .cloned()
        .unwrap_or_else(|| Tenancy::holdings(&tenant_list));
    let tenancy = Tenancy::new(
        &tenant_list,
        &options.domain,
        &options.lb_networks,
        &holdings,
    );
    let classes = ingress::ClassFilter::new(store);
    let assigned =
        bind::assigned_hostnames(store, &tenancy, |i| classes.serves(i), &options.domain);
    let mut claims: Vec<Claim> = Vec::new();
    let mut custom_owners = FastHashMap::default();
    let mut hosts = bind::TenantHosts {
        tenancy: &tenancy,
        options,
        assigned: &assigned,
        claims: &mut claims,
        custom_owners: &mut custom_owners,
    };
    let mut resolver = Resolver::new(store, registry, &tenancy, reuse);
    let mut policies = Policies::new(&options.tenant_gates);
    policies.ssl_redirect_default = options.ssl_redirect_default;
    let mut certs = CertTable::default();
    // Client-certificate settings by host: the Ingresses' first, then the
    // Gateways' (as certificates), the first setting of a host keeping it.
    let mut client_auth = client_auth::ClientAuthTable::default();

    // Gateway API routes first: an Ingress rule on a host pattern a route
    // holds asks it (`claim`), and the older of the two keeps it.
    let mut gateway = gateway::GatewayCompile::new(
        &mut gateway::Context {
            store,
            hosts: &mut hosts,
            gates: &options.tenant_gates,
        },
        &mut resolver,
        &mut policies,
    );
    let ingresses = ingress::compile(
        store,
        &classes,
        &mut hosts,
        &mut resolver,
        &mut policies,
        &mut gateway,
        &mut certs,
        &mut client_auth,
    );
    let own_tables = gateway.take_own();
    let own_client_auth = gateway.client_auth(&mut client_auth);
    let (mut gateway_table, mut gateway_report, gateway_parts) = gateway.finish(store, &mut certs);
    let mut ingress_reports = ingresses.reports;
    // After every Secret is in: a tenant's own certificate always wins.
    let acme_hosts = ingress::assign_acme(
        ingresses.acme_candidates,
        &certs,
        &mut ingress_reports,
        options.acme.as_ref(),
    );
    let (l4, l4_report) = match options.l4.as_ref().and_then(|inputs| {
        l4::compile(
            inputs,
            store,
            &mut hosts,
            generation,
            |ns, name, port, port_name, secured| {
                let upstream = resolver.service_port(ns, name, port, port_name);
                if !secured {
                    return upstream;
                }
                gateway::backend_tls::secured_stream(store, &resolver, (ns, name, port), upstream)
            },
        )
    }) {
        Some((compiled, report)) => {
            // The sockets the L4 plane bound for Gateways with their own
            // address, each with that Gateway's routes at its port.
            // Its client-certificate settings likewise, per socket.
            let (mut own_tables, mut own_client_auth) = (own_tables, own_client_auth);
            let mut sockets = Vec::new();
            let mut auth_sockets = Vec::new();
            for (key, route) in &compiled.table.listeners {
                let Some(edge) = route.edge.as_ref() else {
                    continue;
                };
                let at = (edge.gateway.clone(), key.port);
                sockets.push((key.socket_addr(), own_tables.remove(&at)));
                auth_sockets.push((key.socket_addr(), own_client_auth.remove(&at)));
            }
            gateway_table.set_own(gateway::table::OwnTables::new(sockets));
            client_auth.set_own(auth_sockets);
            (Some(compiled), Some(report))
        }
        None => (None, None),
    };
    // Each Gateway's status, once, from both planes' parts.
    let l4_parts: Option<Vec<api_status::L4Part<'_>>> = l4_report
        .as_ref()
        .map(|r| r.gateways.iter().map(|g| g.part()).collect());
    (gateway_report.gateways, gateway_report.listener_sets) =
        api_status::gateways(gateway_parts, l4_parts.as_deref());

    let domains = domain_report(&mut claims, options.proofs.as_deref());
    let backends = resolver.report();
    let kept = resolver.into_kept();
    let routes = ingresses.routes;
    let (passthrough, passthrough_conditions) = passthrough::compile(
        store,
        &routes,
        ingress_reports
            .iter()
            .map(|r| (NsName::new(r.namespace.clone(), r.name.clone()), r.served)),
    );
    if !passthrough_conditions.is_empty() {
        // One pass over the reports, whatever the number of conditions.
        let mut by_ingress: FastHashMap<NsName, condition::Condition> =
            passthrough_conditions.into_iter().collect();
        for report in &mut ingress_reports {
            let id = NsName::new(report.namespace.clone(), report.name.clone());
            if let Some(condition) = by_ingress.remove(&id) {
                report.conditions.push(condition);
            }
        }
    }
    let report = StatusReport {
        generation,
        ingresses: ingress_reports,
        backends,
        problems,
        domains,
        l4: l4_report,
        gateway: gateway_report,
        backend_tls_policies: gateway::backend_tls::report(store),
        route_traffic_policies: gateway::route_policy::report(store),
        tables: TableSizes {
            ingress_routes: routes.len(),
            gateway_hosts: gateway_table.hosts(),
            gateway_entries: gateway_table.len(),
            gateway_links: gateway_table.links(),
        },
    };
    *parts = parts::keep(
        &inputs,
        &tenant_arcs,
        &options.lb_networks,
        &holdings,
        kept,
        previous,
    );
    Snapshot {
        generation,
        routes,
        gateway: gateway_table,
        certs,
        client_auth,
        report,
        claims,
        acme: acme_hosts,
        l4,
        passthrough,
        compile_time: started.elapsed(),
    }
}

/// The custom domains tenants claim, one entry per (cluster, host), with
/// whether DNS proved each.
fn domain_report(claims: &mut Vec<Claim>, proofs: Option<&ProofResults>) -> Vec<DomainReport> {
    claims.sort_by(|a, b| (&a.cluster, &a.host).cmp(&(&b.cluster, &b.host)));
    claims.dedup_by(|a, b| a.cluster == b.cluster && a.host == b.host);
    claims
        .iter()
        .map(|c| DomainReport {
            cluster: c.cluster.clone(),
            host: c.host.clone(),
            routed: proofs.is_some_and(|p| p.is_proven(&c.cluster, &c.host)),
            detail: proofs
                .and_then(|p| p.detail(&c.cluster, &c.host))
                .unwrap_or_else(|| "not checked yet".into()),
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::compile::acme::{CertState, HostStatus};
    use crate::compile::domains::Proof;
    use crate::compile::snapshot::{Condition, IngressReport};
    use teapot_model::manifests::{Loaded, load_text};

    const TENANT: &str = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec:
  cluster: acme
  allowedDomains: [shop.example.com]
  nodeCIDRs: [10.1.0.0/24]
";

    fn backend(ns: &str, name: &str, ip: &str) -> String {
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec: {{ports: [{{port: 80}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
endpoints: [{{addresses: [\"{ip}\"]}}]
ports: [{{name: \"\", port: 8080}}]
"
        )
    }

    fn ingress(ns: &str, name: &str, hosts: &[Option<&str>], default_backend: bool) -> String {
        let rules: String = hosts
            .iter()
            .map(|h| {
                let host = h.map(|h| format!("host: \"{h}\"\n    ")).unwrap_or_default();
                format!("  - {host}http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}\n")
            })
            .collect();
        let default = if default_backend {
            "  defaultBackend: {service: {name: web, port: {number: 80}}}\n"
        } else {
            ""
        };
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: {name}, namespace: {ns}}}
spec:
  ingressClassName: teapot
{default}  rules:
{rules}"
        )
    }

    /// The store of YAML documents, which must all be valid.
    pub(crate) fn test_store(docs: &str) -> Store {
        let mut loaded = Loaded::default();
        load_text(Path::new("t.yaml"), docs, &Store::default(), &mut loaded);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        loaded.store
    }

    /// `pem` indented as a YAML block scalar's lines under a key.
    pub(crate) fn indented(pem: &str) -> String {
        pem.lines().map(|l| format!("    {l}\n")).collect()
    }

    /// A `kubernetes.io/tls` Secret `infra/tls` for `a.example`.
    pub(crate) fn tls_secret() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.example".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: tls, namespace: infra}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indented(&cert.pem()),
            indented(&key.serialize_pem())
        )
    }

    /// Loads YAML documents (which must all be valid) and compiles them.
    pub(crate) fn compile_test_docs(docs: &[String], options: &CompileOptions) -> Snapshot {
        compile(
            &test_store(&docs.join("---\n")),
            Vec::new(),
            1,
            options,
            &EndpointRegistry::default(),
        )
    }

    fn compile_docs(docs: &[String], proofs: Option<Arc<ProofResults>>) -> Snapshot {
        let options = CompileOptions {
            domain: "example.net".into(),
            proofs,
            ..CompileOptions::default()
        };
        compile_test_docs(docs, &options)
    }

    fn compile_acme(docs: &[String], default_tenants: bool) -> Snapshot {
        let options = CompileOptions {
            domain: "example.net".into(),
            proofs: Some(Arc::default()),
            acme: Some(AcmeInputs {
                default_tenants,
                states: Arc::default(),
            }),
            ..CompileOptions::default()
        };
        compile_test_docs(docs, &options)
    }

    /// An older Ingress of another tenant
    /// that only names the custom domain in `tls.hosts` (no rule, no
    /// Secret, no proof) used to get the proven owner's whole Ingress
    /// refused, its assigned hostname included, for as long as it stayed.
    #[test]
    fn an_unproven_claim_never_blocks_the_domains_proven_owner() {
        let tenant = |name: &str, net: u8| {
            format!(
                "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: {name}}}\nspec: {{cluster: {name}, nodeCIDRs: [10.{net}.0.0/24]}}\n"
            )
        };
        // As the agent writes it.
        let mirrored = |ns: &str, ip: &str| {
            backend(ns, "web", ip).replace(
                "labels: {kubernetes.io/service-name: web}",
                "labels: {kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}",
            )
        };
        let ingress = |ns: &str, created: &str, spec: &str| {
            format!(
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: web.shop, namespace: {ns}, creationTimestamp: \"{created}\"}}\nspec:\n  ingressClassName: teapot\n{spec}"
            )
        };
        // A rule for the custom domain and a host-less one, which binds to
        // beta's assigned hostname.
        let rule = |host: &str| {
            let paths = "{paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}";
            format!("  rules:\n  - host: {host}\n    http: {paths}\n  - http: {paths}\n")
        };
        let load = |alpha_spec: &str| {
            let docs = [
                tenant("alpha", 1),
                tenant("beta", 2),
                mirrored("tenant-alpha", "10.1.0.5"),
                mirrored("tenant-beta", "10.2.0.6"),
                ingress("tenant-alpha", "2024-01-01T00:00:00Z", alpha_spec),
                ingress(
                    "tenant-beta",
                    "2024-01-02T00:00:00Z",
                    &rule("www.beta-corp.test"),
                ),
            ];
            let mut loaded = Loaded::default();
            load_text(
                Path::new("t.yaml"),
                &docs.join("---\n"),
                &Store::default(),
                &mut loaded,
            );
            teapot_model::tenancy::admit(&mut loaded, &Store::default(), "example.net", &[]);
            assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
            loaded.store
        };
        let squatted = load("  tls: [{hosts: [www.beta-corp.test]}]\n");
        let proven = |clusters: &[&str]| {
            let mut proofs = ProofResults::default();
            for c in clusters {
                proofs.insert(
                    c,
                    "www.beta-corp.test",
                    Proof {
                        routed: true,
                        detail: "TXT".into(),
                    },
                );
            }
            CompileOptions {
                domain: "example.net".into(),
                proofs: Some(Arc::new(proofs)),
                ..CompileOptions::default()
            }
        };
        let compiled = |store: &Store, options: &CompileOptions| {
            compile(store, Vec::new(), 1, options, &EndpointRegistry::default())
        };
        let s = compiled(&squatted, &proven(&["beta"]));
        let upstream = s
            .routes
            .lookup("www.beta-corp.test", "/")
            .expect("routed for beta");
        assert_eq!(
            upstream.upstream.endpoints.load()[0].addr.ip().to_string(),
            "10.2.0.6"
        );
        assert!(
            routed(&s, "web-shop.beta.lb.example.net"),
            "beta's own host routes too"
        );
        assert!(
            s.certs.lookup("www.beta-corp.test").is_none(),
            "alpha got no certificate"
        );

        // Two tenants that both proved it: the older Ingress's tenant has
        // it, the other is told why, without its name.
        let both = load(&rule("www.beta-corp.test"));
        let s = compiled(&both, &proven(&["alpha", "beta"]));
        let hosts = report_condition(&s, |r| r.namespace == "tenant-beta", "HostsAccepted");
        assert!(
            hosts.message.contains("proven by another tenant too"),
            "{hosts:?}"
        );
        assert!(!hosts.message.contains("alpha"), "{hosts:?}");
    }

    /// The compile is a function of its arguments: proof results and ACME
    /// states handed over as plain data decide routing and conditions, with
    /// no runtime, watcher, prover or issuer anywhere.
    #[test]
    fn proofs_and_acme_states_as_data_decide_routing_and_conditions() {
        let docs = [
            TENANT.into(),
            backend("tenant-acme", "web", "10.1.0.5"),
            with_tls(
                ingress(
                    "tenant-acme",
                    "web.shop",
                    &[Some("www.acme-corp.com")],
                    false,
                ),
                Some("true"),
                &["www.acme-corp.com"],
            ),
        ];
        let waiting = compile_docs(&docs, Some(Arc::default()));
        assert!(!routed(&waiting, "www.acme-corp.com"));
        assert_eq!(waiting.claims.len(), 1, "the claim goes out for the prover");

        let mut proofs = ProofResults::default();
        proofs.insert(
            "acme",
            "www.acme-corp.com",
            Proof {
                routed: true,
                detail: "CNAME to web-shop.acme.lb.example.net".into(),
            },
        );
        let mut states = std::collections::HashMap::new();
        states.insert(
            "www.acme-corp.com".to_string(),
            HostStatus {
                state: CertState::Issued,
                message: "valid until 2027-01-01".into(),
            },
        );
        let options = CompileOptions {
            domain: "example.net".into(),
            proofs: Some(Arc::new(proofs)),
            acme: Some(AcmeInputs {
                default_tenants: false,
                states: Arc::new(states),
            }),
            ..CompileOptions::default()
        };
        let s = compile_test_docs(&docs, &options);
        assert!(routed(&s, "www.acme-corp.com"));
        assert_eq!(s.acme.hosts().collect::<Vec<_>>(), ["www.acme-corp.com"]);
        let ready = report_condition(&s, |_| true, "CertificateReady");
        assert_eq!((ready.status, ready.reason), ("True", "Issued"));
        assert_eq!(
            s.report.domains[0].detail,
            "CNAME to web-shop.acme.lb.example.net"
        );
    }

    fn with_tls(ingress: String, annotation: Option<&str>, hosts: &[&str]) -> String {
        let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
        let ingress = match annotation {
            Some(v) => {
                let (head, tail) = ingress.split_once("}\nspec:").unwrap();
                format!("{head}, annotations: {{teapot.dev/acme: \"{v}\"}}}}\nspec:{tail}")
            }
            None => ingress,
        };
        ingress.replace(
            "spec:\n",
            &format!(
                "spec:\n  tls: [{{hosts: [{}], secretName: missing}}]\n",
                hosts.join(", ")
            ),
        )
    }

    #[test]
    fn acme_hosts_are_routed_exact_tls_hosts_of_opted_in_ingresses() {
        let s = compile_acme(
            &[
                backend("ops", "web", "127.0.0.1"),
                with_tls(
                    ingress(
                        "ops",
                        "shop",
                        &[Some("a.example"), Some("*.w.example")],
                        false,
                    ),
                    Some("true"),
                    &["a.example", "*.w.example", "not-routed.example"],
                ),
                with_tls(
                    ingress("ops", "plain", &[Some("p.example")], false),
                    None,
                    &["p.example"],
                ),
            ],
            false,
        );
        assert_eq!(s.acme.hosts().collect::<Vec<_>>(), ["a.example"]);
        // Its entry's only ACME host: kube mode stores it under secretName.
        assert_eq!(
            s.acme.get("a.example").unwrap().secret.as_deref(),
            Some("missing")
        );
        let tls = report_condition(&s, |r| r.name == "shop", "TLSReady");
        assert_eq!(
            tls.status, "True",
            "a missing Secret is expected with ACME: {}",
            tls.message
        );
        let cert = report_condition(&s, |r| r.name == "shop", "CertificateReady");
        assert_eq!((cert.status, cert.reason), ("False", "Pending"));
        let plain = s
            .report
            .ingresses
            .iter()
            .find(|r| r.name == "plain")
            .unwrap();
        assert!(
            plain
                .conditions
                .iter()
                .all(|c| c.type_ != "CertificateReady")
        );
    }

    #[test]
    fn acme_in_tenant_namespaces_follows_policy_and_opt_out() {
        let tenant_ingress = |annotation| {
            with_tls(
                ingress(
                    "tenant-acme",
                    "web.shop",
                    &[
                        Some("api.shop.example.com"),
                        Some("www.acme-corp.com"),
                        None,
                    ],
                    false,
                ),
                annotation,
                &[
                    "api.shop.example.com",
                    "www.acme-corp.com",
                    "web-shop.acme.lb.example.net",
                ],
            )
        };
        let docs = |annotation| {
            [
                TENANT.to_string(),
                backend("tenant-acme", "web", "10.1.0.5"),
                tenant_ingress(annotation),
            ]
        };
        // The operator default covers tenants; an unproven custom domain
        // is not routed, so it gets no certificate either.
        let s = compile_acme(&docs(None), true);
        assert_eq!(
            s.acme.hosts().collect::<Vec<_>>(),
            ["api.shop.example.com", "web-shop.acme.lb.example.net"]
        );
        assert_eq!(
            s.acme.get("api.shop.example.com").unwrap().namespace,
            "tenant-acme"
        );
        // A tenant's secretName is the agent's mirror name: never ACME's.
        assert_eq!(s.acme.get("api.shop.example.com").unwrap().secret, None);
        assert!(compile_acme(&docs(Some("false")), true).acme.is_empty());
        assert!(compile_acme(&docs(None), false).acme.is_empty());
    }

    #[test]
    fn a_secret_certificate_beats_acme() {
        let pem = teapot_testkit::certs::self_signed(&["a.example"]);
        let secret = teapot_testkit::certs::tls_secret_yaml("ops", "missing", &pem);
        let s = compile_acme(
            &[
                backend("ops", "web", "127.0.0.1"),
                secret,
                with_tls(
                    ingress("ops", "shop", &[Some("a.example")], false),
                    Some("true"),
                    &["a.example"],
                ),
            ],
            false,
        );
        assert!(s.acme.is_empty());
        assert!(s.certs.lookup("a.example").is_some());
        // The Secret serving it is listed with its notAfter, for the
        // expiry metric.
        let expiry: Vec<(&str, i64)> = s.certs.secret_expiry().collect();
        assert_eq!(expiry.len(), 1, "{expiry:?}");
        assert_eq!(expiry[0].0, "ops/missing");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(expiry[0].1 > now, "{expiry:?}");
    }

    fn annotated(ingress: String, annotations: &str) -> String {
        ingress.replacen(
            "namespace: ",
            &format!("annotations: {{{annotations}}}, namespace: "),
            1,
        )
    }

    #[test]
    fn routes_carry_the_body_limit_and_the_tenant_gate() {
        let options = CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        };
        let s = compile_test_docs(
            &[
                TENANT.replace(
                    "nodeCIDRs",
                    "limits: {requestsPerSecond: 7}
  nodeCIDRs",
                ),
                backend("tenant-acme", "web", "10.1.0.5"),
                annotated(
                    ingress("tenant-acme", "web.shop", &[None], false),
                    "teapot.dev/max-body-size: 10k",
                ),
                backend("ops", "web", "127.0.0.1"),
                ingress("ops", "plain", &[Some("plain.example")], false),
                annotated(
                    ingress("ops", "big", &[Some("big.example")], false),
                    "teapot.dev/max-body-size: \"0\"",
                ),
                annotated(
                    ingress("ops", "bad", &[Some("bad.example")], false),
                    "teapot.dev/max-body-size: 10mb",
                ),
            ],
            &options,
        );
        let tenant = s
            .routes
            .lookup("web-shop.acme.lb.example.net", "/")
            .unwrap();
        assert_eq!(tenant.max_body_size(), Some(10 * 1024));
        assert_eq!(&*tenant.tenant().expect("tenant gate").cluster, "acme");
        let plain = s.routes.lookup("plain.example", "/").unwrap();
        assert!(plain.policy.is_none(), "no allocation without limits");
        let big = s.routes.lookup("big.example", "/").unwrap();
        assert_eq!(big.max_body_size(), Some(0));
        assert!(big.tenant().is_none());
        let bad = s.routes.lookup("bad.example", "/").unwrap();
        assert_eq!(bad.max_body_size(), None);
        let condition = report_condition(&s, |r| r.name == "bad", "AnnotationsAccepted");
        assert!(condition.message.contains("max-body-size"), "{condition:?}");
        // The same gate across compiles, so a reload keeps the counters.
        let again = compile_test_docs(
            &[
                TENANT.into(),
                backend("tenant-acme", "web", "10.1.0.5"),
                ingress("tenant-acme", "web.shop", &[None], false),
            ],
            &options,
        );
        let gate = again
            .routes
            .lookup("web-shop.acme.lb.example.net", "/")
            .and_then(|r| r.tenant().cloned())
            .unwrap();
        assert!(Arc::ptr_eq(&gate, tenant.tenant().unwrap()));
    }

    /// The condition `type_` of the first Ingress report `which` picks.
    fn report_condition<'s>(
        s: &'s Snapshot,
        which: impl Fn(&IngressReport) -> bool,
        type_: &str,
    ) -> &'s Condition {
        let report = s
            .report
            .ingresses
            .iter()
            .find(|r| which(r))
            .expect("reported");
        report
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} in {:?}", report.conditions))
    }

    fn routed(s: &Snapshot, host: &str) -> bool {
        s.routes.lookup(host, "/").is_some_and(|u| !u.is_empty())
    }

    #[test]
    fn tenant_hostless_rules_and_default_backend_bind_to_the_assigned_hostname() {
        let s = compile_docs(
            &[
                TENANT.into(),
                backend("tenant-acme", "web", "10.1.0.5"),
                ingress("tenant-acme", "web.shop", &[None], true),
            ],
            None,
        );
        assert!(routed(&s, "web-shop.acme.lb.example.net"));
        assert!(!routed(&s, "anything.else"), "never the whole fleet");
        assert!(
            s.routes
                .lookup("web-shop.acme.lb.example.net", "/x")
                .is_some()
        );
        let report = &s.report.ingresses[0];
        let lb = report.status.load_balancer.as_ref().unwrap();
        assert_eq!(
            lb.ingress.as_ref().unwrap()[0].hostname.as_deref(),
            Some("web-shop.acme.lb.example.net")
        );
    }

    #[test]
    fn operator_namespaces_keep_standard_semantics() {
        let s = compile_docs(
            &[
                backend("ops", "web", "127.0.0.1"),
                ingress("ops", "catchall", &[None], true),
            ],
            None,
        );
        assert!(routed(&s, "anything.else"));
    }

    /// A tenant's ListenerSet binds its hostname-less listeners to its
    /// assigned hostname, so a custom domain may be proved by a CNAME to
    /// it, as to a Gateway's or an Ingress's.
    #[test]
    fn a_tenant_listener_sets_assigned_hostname_proves_a_custom_domain() {
        let s = compile_docs(
            &[
                TENANT.into(),
                backend("tenant-acme", "web", "10.1.0.5"),
                ingress("tenant-acme", "web.shop", &[Some("www.acme-corp.com")], false),
                "apiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {name: tls-set, namespace: tenant-acme}\nspec:\n  parentRef: {name: shared, namespace: edge}\n  listeners: [{name: h, protocol: HTTP, port: 80}]\n".into(),
            ],
            None,
        );
        assert_eq!(s.claims.len(), 1);
        let mut targets = s.claims[0].targets.clone();
        targets.sort();
        assert_eq!(
            targets,
            [
                "tls-set.acme.lb.example.net",
                "web-shop.acme.lb.example.net"
            ]
        );
    }

    #[test]
    fn tenant_hosts_outside_its_scope_are_not_routed() {
        let s = compile_docs(
            &[
                TENANT.into(),
                backend("tenant-acme", "web", "10.1.0.5"),
                ingress(
                    "tenant-acme",
                    "web.shop",
                    &[
                        Some("api.shop.example.com"),
                        Some("web.other.lb.example.net"),
                        Some("*.example.org"),
                        Some("www.acme-corp.com"),
                    ],
                    false,
                ),
            ],
            None,
        );
        assert!(routed(&s, "api.shop.example.com"));
        assert!(!routed(&s, "web.other.lb.example.net"));
        assert!(!routed(&s, "x.example.org"));
        assert!(
            !routed(&s, "www.acme-corp.com"),
            "custom domain waits for proof"
        );
        assert_eq!(s.claims.len(), 1);
        assert_eq!(s.claims[0].host, "www.acme-corp.com");
        assert_eq!(s.claims[0].targets, ["web-shop.acme.lb.example.net"]);
        let hosts = report_condition(&s, |_| true, "HostsAccepted");
        assert_eq!(hosts.status, "False");
        assert!(
            hosts.message.contains("outside your own subtree"),
            "{}",
            hosts.message
        );
        assert!(
            hosts.message.contains("waiting for its DNS proof"),
            "{}",
            hosts.message
        );
    }

    #[test]
    fn tenant_endpoints_outside_node_cidrs_or_forbidden_are_dropped() {
        for (ip, why) in [("127.0.0.1", "loopback"), ("10.9.0.1", "nodeCIDRs")] {
            let s = compile_docs(
                &[
                    TENANT.into(),
                    backend("tenant-acme", "web", ip),
                    ingress("tenant-acme", "web.shop", &[None], false),
                ],
                None,
            );
            let upstream = s
                .routes
                .lookup("web-shop.acme.lb.example.net", "/")
                .unwrap();
            assert!(upstream.is_empty(), "{ip}");
            assert!(
                upstream.refused[0].contains(why),
                "{ip}: {:?}",
                upstream.refused
            );
        }
    }

    /// Gateways with their own address keep their validation on their
    /// own sockets, per port (`perPort`): the same host is asked another
    /// CA on each, and none on the shared 443 or on a Gateway's socket
    /// without one.
    #[test]
    fn own_addresses_keep_their_validation_per_socket() {
        use crate::compile::client_auth::ClientAuthMode;
        use crate::compile::client_auth::tests::ca_pem;
        use crate::compile::l4::{L4Config, L4Inputs};
        let (a, b) = (ca_pem("CA A"), ca_pem("CA B"));
        let config_map = |name: &str, pem: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: infra}}\ndata:\n  ca.crt: |\n{}",
                indented(pem)
            )
        };
        let https = |port: u16| {
            format!(
                "  - {{name: https-{port}, protocol: HTTPS, port: {port}, hostname: a.example, tls: {{certificateRefs: [{{name: tls}}]}}}}\n"
            )
        };
        let gateway = |name: &str, address: Option<&str>, frontend: &str, ports: &[u16]| {
            let addresses = address
                .map(|a| format!("  addresses: [{{type: IPAddress, value: {a}}}]\n"))
                .unwrap_or_default();
            let listeners: String = ports.iter().map(|p| https(*p)).collect();
            format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: infra}}\nspec:\n  gatewayClassName: teapot\n{addresses}{frontend}  listeners:\n{listeners}"
            )
        };
        let docs = vec![
            config_map("ca-a", &a),
            config_map("ca-b", &b),
            tls_secret(),
            gateway(
                "one",
                Some("127.0.77.2"),
                "  tls:\n    frontend:\n      default:\n        validation: {caCertificateRefs: [{group: \"\", kind: ConfigMap, name: ca-a}]}\n      perPort:\n      - {port: 8443, tls: {validation: {caCertificateRefs: [{group: \"\", kind: ConfigMap, name: ca-b}]}}}\n",
                &[443, 8443],
            ),
            gateway("two", Some("127.0.77.3"), "", &[443]),
            gateway("shared", None, "", &[443]),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: infra}\nspec:\n  parentRefs: [{name: one}, {name: two}, {name: shared}]\n  hostnames: [a.example]\n  rules: [{backendRefs: [{name: web, port: 8080}]}]\n".into(),
        ];
        let options = CompileOptions {
            l4: Some(L4Inputs {
                config: std::sync::Arc::new(L4Config {
                    pools: vec!["default=127.0.77.0/29".parse().unwrap()],
                    ..L4Config::default()
                }),
                previous: Default::default(),
                runtime: Default::default(),
            }),
            ..CompileOptions::default()
        };
        let s = compile_test_docs(&docs, &options);
        let socket = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        assert!(s.gateway.own().serves(socket("127.0.77.2:443").ip()));
        let on = |local: Option<&str>| {
            s.client_auth
                .at(local.map(socket))
                .and_then(|t| t.lookup("a.example"))
                .cloned()
        };
        let default = on(Some("127.0.77.2:443")).expect("the default on 443");
        assert_eq!(default.source, "Gateway infra/one port 443");
        assert_eq!(default.mode, ClientAuthMode::AllowValidOnly);
        let per_port = on(Some("127.0.77.2:8443")).expect("perPort on 8443");
        assert_eq!(per_port.source, "Gateway infra/one port 8443");
        assert!(!per_port.verifies_as(&default), "CA B, not CA A");
        assert!(
            on(Some("127.0.77.3:443")).is_none(),
            "Gateway two asks none"
        );
        assert!(on(None).is_none(), "the shared 443 asks none");
        assert!(s.client_auth.is_empty());
    }
}
