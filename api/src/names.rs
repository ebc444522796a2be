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
/// The GatewayClass tenants set (`spec.gatewayClassName: teapot`).
pub const GATEWAY_CLASS: &str = "teapot";
/// `spec.controllerName` of GatewayClasses that teapot implements.
pub const GATEWAY_CONTROLLER_NAME: &str = "teapot.dev/gateway-controller";
