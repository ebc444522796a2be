//! ingress-nginx's default location of a host: a request for one of an
//! Ingress's rule hosts that matches none of the host's paths goes to
//! that Ingress's `spec.defaultBackend` (ingress-nginx's controller builds
//! each server's `/` location from the first Ingress, by age, with a rule
//! for the host: "use backend specified in Ingress as the default backend
//! for all its rules"; e2e `defaultbackend/with_hosts.go`), instead of
//! teapot's 404. The first Ingress to serve the host decides, whether or
//! not it has a defaultBackend: a newer one's does not take over a host
//! an older Ingress without one answers 404 for, as in ingress-nginx.
//!
//! The `default-backend` annotation is not this: ingress-nginx uses it
//! only for a route whose Service has no endpoint and for
//! `custom-http-errors` pages (its custom default backend is made only
//! for a location's own Service, never for the default location), which
//! crate::compile::policies serves.
//!
//! In a tenant namespace the defaultBackend also serves the Ingress's
//! assigned hostname (crate::compile::ingress); a host's request never
//! reaches another tenant's backend, as the rule hosts were admitted as
//! the tenant's.
//!
//! The first Ingress to serve a host decides it in the route table's host
//! group (`crate::compile::routes::PathTable::decide_fallback`), where the
//! compile asks; this module holds the rule's tests.

#[cfg(test)]
mod tests {
    use crate::compile::CompileOptions;
    use crate::compile::snapshot::Snapshot;
    use crate::compile::tests::compile_test_docs;

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

    /// An Ingress created at minute `age`, with a rule for `host` (path
    /// `/api` to `api`, or none) and a defaultBackend `default`.
    fn ingress(
        ns: &str,
        name: &str,
        age: u32,
        host: Option<&str>,
        default: Option<&str>,
    ) -> String {
        let default = default
            .map(|d| {
                format!("  defaultBackend: {{service: {{name: {d}, port: {{number: 80}}}}}}\n")
            })
            .unwrap_or_default();
        let rules = host
            .map(|h| format!("  rules:\n  - host: {h}\n    http: {{paths: [{{path: /api, pathType: Prefix, backend: {{service: {{name: api, port: {{number: 80}}}}}}}}]}}\n"))
            .unwrap_or_default();
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"2026-01-01T00:{age:02}:00Z\"}}
spec:
  ingressClassName: teapot
{default}{rules}"
        )
    }

    const TENANT: &str = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec:
  cluster: acme
  allowedDomains: [shop.example.com]
  nodeCIDRs: [10.1.0.0/24]
";

    fn upstream(s: &Snapshot, host: &str, path: &str) -> Option<String> {
        s.routes.lookup(host, path).map(|r| r.upstream.name.clone())
    }

    /// ingress-nginx's `/` location of a host: its unmatched paths go to
    /// the defaultBackend of the first Ingress with a rule for it (not
    /// teapot's 404), in a tenant's namespace as in the operator's.
    #[test]
    fn a_hosts_unmatched_paths_go_to_its_first_ingress_default_backend() {
        let ns = "tenant-acme";
        let mut docs = vec![TENANT.to_string()];
        for svc in ["web", "api", "late"] {
            docs.push(backend(ns, svc, "10.1.0.5"));
            docs.push(backend("ops", svc, "127.0.0.1"));
        }
        docs.push(backend("ops", "global", "127.0.0.1"));
        // Tenant: a host with a defaultBackend; a host an older Ingress
        // without one decided; a rule with no paths (e2e with_hosts.go).
        docs.push(ingress(ns, "a", 1, Some("a.shop.example.com"), Some("web")));
        docs.push(ingress(ns, "b-first", 2, Some("b.shop.example.com"), None));
        docs.push(ingress(
            ns,
            "b-late",
            3,
            Some("b.shop.example.com"),
            Some("late"),
        ));
        // Operator: an older Ingress holds the fleet's default backend; a
        // newer one's defaultBackend still serves its own host.
        docs.push(ingress("ops", "global", 4, None, Some("global")));
        docs.push(ingress("ops", "c", 5, Some("c.example"), Some("web")));
        let options = CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        };
        let s = compile_test_docs(&docs, &options);
        let up = |host, path| upstream(&s, host, path);
        assert_eq!(
            up("a.shop.example.com", "/api/x").as_deref(),
            Some("tenant-acme/api:80")
        );
        assert_eq!(
            up("a.shop.example.com", "/other").as_deref(),
            Some("tenant-acme/web:80")
        );
        assert_eq!(
            up("A.Shop.Example.Com:80", "/").as_deref(),
            Some("tenant-acme/web:80")
        );
        assert_eq!(
            up("b.shop.example.com", "/api").as_deref(),
            Some("tenant-acme/api:80")
        );
        // Decided by b-first, which has none: as for a host no Ingress
        // has, the fleet's default backend (the operator's), never b-late's.
        let global = Some("ops/global:80");
        assert_eq!(up("b.shop.example.com", "/other").as_deref(), global);
        assert_eq!(up("other.shop.example.com", "/x").as_deref(), global);
        assert_eq!(up("c.example", "/other").as_deref(), Some("ops/web:80"));
        assert_eq!(up("c.example", "/api").as_deref(), Some("ops/api:80"));
        assert_eq!(up("d.example", "/x").as_deref(), Some("ops/global:80"));
    }
}
