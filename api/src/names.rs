//! Names fixed by docs/architecture.md. Changing one is an API break for tenants.

/// The IngressClass tenants set (`spec.ingressClassName: teapot`).
pub const INGRESS_CLASS: &str = "teapot";
/// `spec.controller` of IngressClasses that teapot implements.
pub const CONTROLLER_NAME: &str = "teapot.dev/ingress-controller";
/// `spec.loadBalancerClass` of Services that teapot serves at L4.
pub const LOAD_BALANCER_CLASS: &str = "teapot.dev/lb";
/// Annotation that makes an IngressClass the default for class-less Ingresses.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
/// Label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Label on the LB-cluster namespace that a Tenant owns.
pub const TENANT_LABEL: &str = "teapot.dev/tenant";
/// `type` of Secrets that carry a certificate and key.
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";
/// `type` of the Secrets that carry a `ca.crt` alone (ingress-nginx's
/// `proxy-ssl-secret` without a client certificate); also the type of a
/// Secret that names none.
pub const CA_SECRET_TYPE: &str = "Opaque";
/// The GatewayClass tenants set (`spec.gatewayClassName: teapot`).
pub const GATEWAY_CLASS: &str = "teapot";
/// `spec.controllerName` of GatewayClasses that teapot implements.
pub const GATEWAY_CONTROLLER_NAME: &str = "teapot.dev/gateway-controller";

/// The Secret an ingress-nginx annotation such as `proxy-ssl-secret`
/// names: `NAMESPACE/NAME`, or a bare `NAME` in `namespace` (the
/// Ingress's), as ingress-nginx reads it (`cache.SplitMetaNamespaceKey`).
/// The agent, which mirrors the Secret, and the compile, which reads it,
/// must agree on this.
pub fn namespaced_reference<'a>(reference: &'a str, namespace: &'a str) -> (&'a str, &'a str) {
    reference.split_once('/').unwrap_or((namespace, reference))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bare_name_is_the_ingresss_own_namespace() {
        assert_eq!(
            super::namespaced_reference("shop/ca", "web"),
            ("shop", "ca")
        );
        assert_eq!(super::namespaced_reference("ca", "web"), ("web", "ca"));
    }
}
