//! `teapot webhook`: the LB cluster's ValidatingWebhook (DESIGN.md, "Security
//! rules"). Not built yet: issue #5 ("Tenant API and admission webhook").
//! The crate exists so the workspace has the layout DESIGN.md fixes; it
//! exports nothing.
