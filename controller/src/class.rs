//! IngressClass `teapot` and GatewayClass `teapot`: created when missing,
//! checked when present.

use k8s_openapi::api::networking::v1::{IngressClass, IngressClassSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use teapot_api::gateway_api::GatewayClass;
use teapot_api::gateway_api::generated::gateway_classes::GatewayClassSpec;
use teapot_api::names::{CONTROLLER_NAME, GATEWAY_CLASS, GATEWAY_CONTROLLER_NAME, INGRESS_CLASS};

use crate::Error;

/// Creates IngressClass `teapot` (`spec.controller:
/// teapot.dev/ingress-controller`) unless it exists; refuses to run when
/// it exists for another controller, since serving its Ingresses would
/// take them from their owner. An existing class is never modified (the
/// default-class annotation is the cluster admin's choice).
pub async fn ensure(client: &Client) -> Result<(), Error> {
    let api: Api<IngressClass> = Api::all(client.clone());
    if let Some(existing) = api.get_opt(INGRESS_CLASS).await? {
        let controller = existing.spec.and_then(|s| s.controller).unwrap_or_default();
        if controller != CONTROLLER_NAME {
            return Err(Error::ClassTaken {
                name: INGRESS_CLASS.into(),
                controller,
                expected: CONTROLLER_NAME,
            });
        }
        return Ok(());
    }
    let class = IngressClass {
        metadata: ObjectMeta {
            name: Some(INGRESS_CLASS.into()),
            ..ObjectMeta::default()
        },
        spec: Some(IngressClassSpec {
            controller: Some(CONTROLLER_NAME.into()),
            parameters: None,
        }),
    };
    match api.create(&PostParams::default(), &class).await {
        Ok(_) => {
            tracing::info!(class = INGRESS_CLASS, "IngressClass created");
            Ok(())
        }
        // Another replica was faster.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates GatewayClass `teapot` (`spec.controllerName:
/// teapot.dev/gateway-controller`) unless it exists, like IngressClass
/// `teapot`: refuses to run when it exists for another controller, never
/// modifies an existing one.
pub async fn ensure_gateway_class(client: &Client) -> Result<(), Error> {
    let api: Api<GatewayClass> = Api::all(client.clone());
    if let Some(existing) = api.get_opt(GATEWAY_CLASS).await? {
        if existing.spec.controller_name != GATEWAY_CONTROLLER_NAME {
            return Err(Error::ClassTaken {
                name: format!("GatewayClass {GATEWAY_CLASS}"),
                controller: existing.spec.controller_name,
                expected: GATEWAY_CONTROLLER_NAME,
            });
        }
        return Ok(());
    }
    let class = GatewayClass::new(
        GATEWAY_CLASS,
        GatewayClassSpec {
            controller_name: GATEWAY_CONTROLLER_NAME.into(),
            description: Some("Shared load balancing by the teapot proxy fleet".into()),
            parameters_ref: None,
        },
    );
    match api.create(&PostParams::default(), &class).await {
        Ok(_) => {
            tracing::info!(class = GATEWAY_CLASS, "GatewayClass created");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
