//! A Gateway's frontend client-certificate validation
//! (`spec.tls.frontend`: `default.validation`, `perPort[].tls.validation`)
//! into the [`ClientAuth`] of the hosts its HTTPS listeners on that port
//! serve (crate::compile::client_auth, docs/gateway-api.md, "Client
//! certificates (frontend validation)").
//!
//! - `caCertificateRefs`: the `ca.crt` of a ConfigMap, or of an Opaque
//!   Secret; a tenant Gateway's in its own namespace only (a
//!   ReferenceGrant never opens another tenant's CA), an operator
//!   Gateway's elsewhere with a ReferenceGrant. At most
//!   [`MAX_CA_REFS`] references, their bundles joined under the
//!   bundle bounds.
//! - `mode`: `AllowValidOnly` (the default) refuses in the handshake,
//!   `AllowInsecureFallback` serves any client and passes nothing on.
//! - Depth: the specification leaves it to the implementation; teapot
//!   takes [`GATEWAY_DEPTH`].
//! - Fail closed: a listener whose validation names no usable CA is not
//!   served (`Accepted=False NoValidCACertificate`, `ResolvedRefs=False
//!   InvalidCACertificateRef`), so its hosts are never served without the
//!   validation it asked for. A reference that cannot be read beside one
//!   that can leaves `ResolvedRefs=False` and serves the readable CAs.

use std::collections::HashMap;
use std::sync::Arc;

use teapot_api::HostPattern;
use teapot_api::admission::CA_CERT_KEY;
use teapot_gateway_api::Gateway;
use teapot_gateway_api::generated::gateways::{
    GatewayTlsFrontendDefaultValidationMode as DefaultMode,
    GatewayTlsFrontendPerPortTlsValidationMode as PerPortMode,
};
use teapot_model::attachment;
use teapot_model::store::{NsName, NsRef, Store};

use crate::compile::client_auth::{CaBundle, ClientAuth, ClientAuthMode, ClientAuthTable};
use crate::compile::condition::Condition;

/// `caCertificateRefs` one validation may name (the CRD allows 8).
pub const MAX_CA_REFS: usize = 8;

/// The chain depth a Gateway's validation allows: the client's
/// certificate and up to two intermediates below a CA of the bundle (an
/// issuing CA under a root, and one more).
pub const GATEWAY_DEPTH: u8 = 3;

/// A listener's validation: none, the setting, or why it cannot be served
/// (`Err`: not served at all) with the ResolvedRefs problem of a
/// reference that could not be read beside usable ones.
#[derive(Debug, Clone)]
pub struct Frontend {
    pub setting: Option<Arc<ClientAuth>>,
    /// A reference that could not be read: the listener's `ResolvedRefs=False`
    /// reason and message.
    pub unresolved: Option<Unresolved>,
}

/// Why a CA reference cannot be used, as the listener's `ResolvedRefs`
/// says it: `InvalidCACertificateKind` (not a ConfigMap or Secret),
/// `RefNotPermitted` (another namespace without a ReferenceGrant), else
/// `InvalidCACertificateRef`; and the message.
pub type Unresolved = (&'static str, String);

const INVALID_REF: &str = "InvalidCACertificateRef";

/// The validation of the HTTPS listeners of `gateway` on `port`: the
/// `perPort` entry of that port, else the default. `Err`: why a validation
/// has no usable CA (the listener is not served): the first unusable
/// reference's reason and message.
pub fn for_port(
    store: &Store,
    id: &NsName,
    gateway: &Gateway,
    tenant: bool,
    port: i32,
) -> Result<Frontend, Unresolved> {
    let none = Frontend {
        setting: None,
        unresolved: None,
    };
    let Some(frontend) = gateway.spec.tls.as_ref().and_then(|t| t.frontend.as_ref()) else {
        return Ok(none);
    };
    let per_port = frontend.per_port.iter().flatten().find(|p| p.port == port);
    // (group, kind, name, namespace) of each reference, and the mode.
    type Ref<'a> = (&'a str, &'a str, &'a str, Option<&'a str>);
    let (refs, insecure, field): (Vec<Ref<'_>>, bool, String) = match per_port {
        Some(p) => match &p.tls.validation {
            Some(v) => (
                v.ca_certificate_refs
                    .iter()
                    .map(|r| {
                        (
                            r.group.as_str(),
                            r.kind.as_str(),
                            r.name.as_str(),
                            r.namespace.as_deref(),
                        )
                    })
                    .collect(),
                matches!(v.mode, Some(PerPortMode::AllowInsecureFallback)),
                format!("spec.tls.frontend.perPort[port {port}].tls.validation"),
            ),
            None => return Ok(none),
        },
        None => match &frontend.default.validation {
            Some(v) => (
                v.ca_certificate_refs
                    .iter()
                    .map(|r| {
                        (
                            r.group.as_str(),
                            r.kind.as_str(),
                            r.name.as_str(),
                            r.namespace.as_deref(),
                        )
                    })
                    .collect(),
                matches!(v.mode, Some(DefaultMode::AllowInsecureFallback)),
                "spec.tls.frontend.default.validation".to_string(),
            ),
            None => return Ok(none),
        },
    };
    if refs.len() > MAX_CA_REFS {
        return Err((
            INVALID_REF,
            format!(
                "{field}.caCertificateRefs names {} references, more than {MAX_CA_REFS}",
                refs.len()
            ),
        ));
    }
    let mut pem = Vec::new();
    let mut unresolved = None;
    for (i, (group, kind, name, namespace)) in refs.iter().enumerate() {
        let at = format!("{field}.caCertificateRefs[{i}]");
        match ca_of(store, id, tenant, (group, kind, name, *namespace)) {
            Ok(ca) => {
                pem.extend_from_slice(ca);
                pem.push(b'\n');
            }
            Err((reason, why)) => {
                unresolved.get_or_insert((reason, format!("{at}: {why}")));
            }
        }
    }
    if pem.is_empty() {
        return Err(
            unresolved.unwrap_or_else(|| (INVALID_REF, format!("{field} names no CA certificate")))
        );
    }
    let what = format!("Gateway {id} {field}");
    let bundle = CaBundle::from_pem(&pem, &what).map_err(|e| (INVALID_REF, e.to_string()))?;
    let mode = if insecure {
        ClientAuthMode::InsecureFallback
    } else {
        ClientAuthMode::AllowValidOnly
    };
    let mut setting = ClientAuth::new(Arc::new(bundle), mode, format!("Gateway {id} port {port}"));
    setting.max_depth = GATEWAY_DEPTH;
    Ok(Frontend {
        setting: Some(Arc::new(setting)),
        unresolved,
    })
}

/// The settings of the hosts HTTPS listeners serve, each listener's
/// validation read once per compile.
#[derive(Debug, Default)]
pub struct Frontends {
    /// By (Gateway, port): the setting, `None` for none or not served.
    by_port: HashMap<(NsName, i32), Option<Arc<ClientAuth>>>,
    /// (socket, host, setting) in binding order (routes oldest first).
    /// The socket: `None` the shared 443, else (Gateway, port) of a
    /// Gateway with its own address. The host `None`: every host (a
    /// hostname-less listener's routes without hostnames).
    hosts: Vec<(Option<OwnSocket>, Option<HostPattern>, Arc<ClientAuth>)>,
}

/// A socket of a Gateway with its own address: the Gateway and the port.
pub type OwnSocket = (NsName, u16);

/// The tables of the HTTPS sockets of Gateways with their own address,
/// by (Gateway, port), until the L4 plane tells their addresses.
pub type OwnSettings = std::collections::BTreeMap<OwnSocket, ClientAuthTable>;

impl Frontends {
    /// Records that an HTTPS listener of `gateway` on `port` serves `host`
    /// on the shared 443, or (`own`: the port of its socket) on the
    /// Gateway's own address.
    pub fn bind(
        &mut self,
        store: &Store,
        (id, gateway, tenant): (&NsName, &Gateway, bool),
        (port, own): (i32, Option<u16>),
        host: Option<&HostPattern>,
    ) {
        let setting = self
            .by_port
            .entry((id.clone(), port))
            .or_insert_with(|| {
                for_port(store, id, gateway, tenant, port)
                    .ok()
                    .and_then(|f| f.setting)
            })
            .clone();
        if let Some(setting) = setting {
            let socket = own.map(|port| (id.clone(), port));
            self.hosts.push((socket, host.cloned(), setting));
        }
    }

    /// Adds the shared 443's to the snapshot's table and returns those of
    /// each own socket; a host another object's setting holds on the same
    /// socket keeps that one (crate::compile::client_auth), which is
    /// logged. A Gateway with its own address never puts a setting on the
    /// shared socket, nor meets another Gateway's on its own.
    pub fn add_to(&self, table: &mut ClientAuthTable) -> OwnSettings {
        let mut own = OwnSettings::new();
        for (socket, host, setting) in &self.hosts {
            let on = match socket {
                None => &mut *table,
                Some(socket) => own.entry(socket.clone()).or_default(),
            };
            if let Err(e) = on.insert(host.as_ref(), setting.clone()) {
                tracing::warn!(source = %setting.source, "{e}");
            }
        }
        own
    }
}

/// The Gateway's `InsecureFrontendValidationMode` condition: true while a
/// validation of it is `AllowInsecureFallback`.
pub fn insecure_condition(gateway: &Gateway) -> Option<Condition> {
    let frontend = gateway.spec.tls.as_ref()?.frontend.as_ref()?;
    let default = frontend
        .default
        .validation
        .as_ref()
        .is_some_and(|v| matches!(v.mode, Some(DefaultMode::AllowInsecureFallback)));
    let per_port = frontend.per_port.iter().flatten().any(|p| {
        p.tls
            .validation
            .as_ref()
            .is_some_and(|v| matches!(v.mode, Some(PerPortMode::AllowInsecureFallback)))
    });
    (default || per_port).then(|| {
        Condition::new(
            "InsecureFrontendValidationMode",
            true,
            "ConfigurationChanged",
            "a frontend validation is AllowInsecureFallback: clients without a valid certificate are served",
        )
    })
}

/// The `ca.crt` of one reference, or why it has none.
fn ca_of<'s>(
    store: &'s Store,
    gateway: &NsName,
    tenant: bool,
    (group, kind, name, namespace): (&str, &str, &str, Option<&str>),
) -> Result<&'s [u8], Unresolved> {
    let ns = namespace.unwrap_or(&gateway.namespace);
    if !group.is_empty() || !matches!(kind, "ConfigMap" | "Secret") {
        return Err((
            "InvalidCACertificateKind",
            format!(
                "{group:?} {kind:?} is not a ConfigMap or Secret (the kinds teapot reads ca.crt \
                 from)"
            ),
        ));
    }
    if ns != gateway.namespace
        && (tenant || !attachment::granted(store, "Gateway", &gateway.namespace, kind, ns, name))
    {
        return Err((
            "RefNotPermitted",
            format!(
                "{kind} {ns}/{name} is in another namespace and no ReferenceGrant lets this \
                 Gateway use it"
            ),
        ));
    }
    let at = NsRef {
        namespace: ns,
        name,
    };
    let ca: Option<&[u8]> = if kind == "ConfigMap" {
        let Some(c) = store.config_maps.get(&at) else {
            return Err((INVALID_REF, format!("ConfigMap {ns}/{name} not found")));
        };
        c.object
            .data
            .as_ref()
            .and_then(|d| d.get(CA_CERT_KEY))
            .map(|s| s.as_bytes())
    } else {
        let Some(s) = store.ca_secrets.get(&at) else {
            return Err((
                INVALID_REF,
                format!("Secret {ns}/{name} not found or holds no {CA_CERT_KEY}"),
            ));
        };
        s.object
            .data
            .as_ref()
            .and_then(|d| d.get(CA_CERT_KEY))
            .map(|b| b.0.as_slice())
    };
    ca.ok_or_else(|| {
        (
            INVALID_REF,
            format!("{kind} {ns}/{name} has no {CA_CERT_KEY}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use crate::compile::CompileOptions;
    use crate::compile::client_auth::ClientAuthMode;
    use crate::compile::client_auth::tests::ca_pem;
    use crate::compile::tests::{compile_test_docs, indented, tls_secret};

    fn docs(frontend: &str, ca: &str) -> Vec<String> {
        let indented = indented(ca);
        vec![
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ca, namespace: infra}}\ndata:\n  ca.crt: |\n{indented}"
            ),
            tls_secret(),
            format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: infra}}\nspec:\n  gatewayClassName: teapot\n  tls:\n    frontend:\n{frontend}  listeners:\n  - {{name: https, protocol: HTTPS, port: 443, tls: {{certificateRefs: [{{name: tls}}]}}}}\n"
            ),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: infra}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [a.example]\n  rules: [{backendRefs: [{name: web, port: 8080}]}]\n".into(),
        ]
    }

    fn listener_conditions(s: &crate::compile::snapshot::Snapshot) -> serde_json::Value {
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        status["gateways"][0]["status"]["listeners"][0]["conditions"].clone()
    }

    #[test]
    fn a_gateways_validation_is_its_https_hosts_setting() {
        let ca = ca_pem("clients");
        let s = compile_test_docs(
            &docs(
                "      default:\n        validation: {caCertificateRefs: [{group: \"\", kind: ConfigMap, name: ca}]}\n",
                &ca,
            ),
            &CompileOptions::default(),
        );
        let setting = s.client_auth.lookup("a.example").expect("a setting");
        assert_eq!(setting.mode, ClientAuthMode::AllowValidOnly);
        assert_eq!(setting.roots.certs().len(), 1);
        assert_eq!(setting.source, "Gateway infra/gw port 443");
        assert!(s.client_auth.lookup("b.example").is_none());

        let s = compile_test_docs(
            &docs(
                "      default:\n        validation: {mode: AllowInsecureFallback, caCertificateRefs: [{group: \"\", kind: ConfigMap, name: ca}]}\n",
                &ca,
            ),
            &CompileOptions::default(),
        );
        let setting = s.client_auth.lookup("a.example").expect("a setting");
        assert_eq!(setting.mode, ClientAuthMode::InsecureFallback);
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let conditions = status["gateways"][0]["status"]["conditions"]
            .as_array()
            .unwrap();
        assert!(
            conditions
                .iter()
                .any(|c| c["type"] == "InsecureFrontendValidationMode"
                    && c["status"] == "True"
                    && c["reason"] == "ConfigurationChanged"),
            "{conditions:?}"
        );
    }

    #[test]
    fn per_port_validation_replaces_the_default_on_its_port() {
        let (a, b) = (ca_pem("default CA"), ca_pem("per-port CA"));
        let indented_b = indented(&b);
        let mut all = docs(
            "      default:\n        validation: {caCertificateRefs: [{group: \"\", kind: ConfigMap, name: ca}]}\n      perPort:\n      - {port: 8443, tls: {validation: {mode: AllowInsecureFallback, caCertificateRefs: [{group: \"\", kind: ConfigMap, name: ca-8443}, {group: \"\", kind: ConfigMap, name: missing}]}}}\n",
            &a,
        );
        all.push(format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ca-8443, namespace: infra}}\ndata:\n  ca.crt: |\n{indented_b}"
        ));
        let store = crate::compile::tests::test_store(&all.join("---\n"));
        let (id, gateway) = store.gateways.iter().next().unwrap();
        let on = |port| super::for_port(&store, id, &gateway.object, false, port).unwrap();
        let default = on(443).setting.unwrap();
        assert_eq!(default.mode, ClientAuthMode::AllowValidOnly);
        assert_eq!(default.max_depth, super::GATEWAY_DEPTH);
        assert!(on(443).unresolved.is_none());
        let per_port = on(8443);
        let setting = per_port.setting.unwrap();
        assert_eq!(setting.mode, ClientAuthMode::InsecureFallback);
        assert_eq!(setting.source, "Gateway infra/gw port 8443");
        assert!(!setting.verifies_as(&default), "another bundle");
        // The readable CA serves; the missing one is reported.
        let (reason, unresolved) = per_port.unresolved.unwrap();
        assert_eq!(reason, "InvalidCACertificateRef");
        assert!(unresolved.contains("caCertificateRefs[1]"), "{unresolved}");
        assert!(
            unresolved.contains("ConfigMap infra/missing not found"),
            "{unresolved}"
        );
        // A tenant Gateway never reads another namespace's CA.
        let mut gw = (*gateway.object).clone();
        gw.spec
            .tls
            .as_mut()
            .unwrap()
            .frontend
            .as_mut()
            .unwrap()
            .default
            .validation
            .as_mut()
            .unwrap()
            .ca_certificate_refs[0]
            .namespace = Some("other".into());
        let (reason, refused) = super::for_port(&store, id, &gw, true, 443).unwrap_err();
        assert_eq!(reason, "RefNotPermitted");
        assert!(refused.contains("another namespace"), "{refused}");
        // Nor reads a kind that holds no CA.
        let validation = gw
            .spec
            .tls
            .as_mut()
            .unwrap()
            .frontend
            .as_mut()
            .unwrap()
            .default
            .validation
            .as_mut()
            .unwrap();
        validation.ca_certificate_refs[0].namespace = None;
        validation.ca_certificate_refs[0].kind = "Service".into();
        let (reason, refused) = super::for_port(&store, id, &gw, false, 443).unwrap_err();
        assert_eq!(reason, "InvalidCACertificateKind");
        assert!(refused.contains("not a ConfigMap or Secret"), "{refused}");
    }

    #[test]
    fn a_listener_without_a_usable_ca_is_not_served() {
        let s = compile_test_docs(
            &docs(
                "      default:\n        validation: {caCertificateRefs: [{group: \"\", kind: ConfigMap, name: does-not-exist}]}\n",
                &ca_pem("clients"),
            ),
            &CompileOptions::default(),
        );
        assert!(s.client_auth.lookup("a.example").is_none());
        assert!(
            s.gateway.host("a.example").candidates().is_empty(),
            "not served"
        );
        let conditions = listener_conditions(&s);
        let find = |t: &str| {
            conditions
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .cloned()
                .unwrap()
        };
        assert_eq!(find("Accepted")["reason"], "NoValidCACertificate");
        assert_eq!(find("ResolvedRefs")["reason"], "InvalidCACertificateRef");
        assert_eq!(find("Programmed")["status"], "False");
    }
}
