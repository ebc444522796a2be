//! Shared fixtures for the policy unit tests.

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;

use super::{AdmissionContext, Holder, Holdings, Violation};
use crate::host::HostPattern;
use crate::tenant::Tenant;

pub const DOMAIN: &str = "example.net";
pub const NS: &str = "tenant-acme";

/// Tenant `acme` (granted `shop.example.com`, nodes `10.1.0.0/24` and
/// `fd00:1::/64`), tenant `globex` (granted `globex.example.org`, nodes
/// `10.2.0.0/24`, holding `www.globex.com` and `*.apps.globex.io`), and
/// the operator holding `grafana.ops.example.org`.
pub struct Fixture {
    pub tenant: Tenant,
    pub globex: Tenant,
    pub holdings: Holdings,
    pub lb: Vec<IpNet>,
}

pub fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

impl Fixture {
    pub fn new() -> Fixture {
        let tenant: Tenant = yaml(
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec:\n  cluster: acme\n  allowedDomains: [shop.example.com]\n  nodeCIDRs: [10.1.0.0/24, \"fd00:1::/64\"]\n",
        );
        let globex: Tenant = yaml(
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: globex}\nspec:\n  cluster: globex\n  allowedDomains: [globex.example.org]\n  nodeCIDRs: [10.2.0.0/24]\n",
        );
        let mut holdings = Holdings::from_objects([&tenant, &globex], []);
        let g = Holder::Tenant("globex".into());
        for h in ["www.globex.com", "*.apps.globex.io"] {
            holdings.insert(g.clone(), &HostPattern::parse(h).unwrap());
        }
        holdings.insert(
            Holder::Operator {
                namespace: "monitoring".into(),
            },
            &HostPattern::parse("grafana.ops.example.org").unwrap(),
        );
        Fixture {
            tenant,
            globex,
            holdings,
            lb: vec![
                "10.96.0.0/12".parse().unwrap(),
                "192.168.100.0/24".parse().unwrap(),
            ],
        }
    }

    pub fn ctx(&self) -> AdmissionContext<'_> {
        AdmissionContext::new(&self.tenant, DOMAIN, &self.lb, &self.holdings)
    }

    pub fn limit_hosts(&mut self, hosts: u32, paths: u32) {
        let limits = self.tenant.spec.limits.get_or_insert_default();
        limits.max_hosts_per_ingress = Some(hosts);
        limits.max_paths_per_ingress = Some(paths);
    }

    pub fn max_listeners(&mut self, n: u32) {
        self.tenant.spec.l4.get_or_insert_default().max_listeners = Some(n);
    }
}

pub fn fields(v: &[Violation]) -> Vec<String> {
    v.iter().map(|v| v.field.clone()).collect()
}

pub fn ingress(spec: &str) -> Ingress {
    yaml(&format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: web, namespace: {NS}}}\nspec:\n{spec}"
    ))
}

pub fn service(spec: &str) -> Service {
    yaml(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {NS}}}\nspec:\n{spec}"
    ))
}

pub fn endpoint_slice(body: &str) -> EndpointSlice {
    yaml(&format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n  namespace: {NS}\n  labels: {{kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: sync.teapot.dev}}\n{body}"
    ))
}
