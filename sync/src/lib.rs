//! The tenant agent's EndpointSlice mirror (`nodeport` and `pod` modes). Not
//! built yet: issue #6. The crate exists for the layout DESIGN.md fixes; it
//! exports nothing.
