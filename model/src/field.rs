//! Why a document was refused, naming the field: what typed validation
//! ([`crate::validate`]) and the Gateway API schema rules
//! ([`crate::gateway`]) both answer with.

/// Why a document was refused, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: Option<String>,
    pub message: String,
}

impl FieldError {
    pub(crate) fn at(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: Some(field.into()),
            message: message.into(),
        }
    }
}
