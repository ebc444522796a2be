//! Writes the CRD YAML of teapot's own kinds (`api/crd/tenant.yaml`,
//! `api/crd/routetrafficpolicy.yaml`) from the Rust types.

fn main() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/crd");
    for (file, yaml) in [
        ("tenant.yaml", teapot_api::tenant::crd_yaml()),
        (
            "routetrafficpolicy.yaml",
            teapot_api::route_policy::crd_yaml(),
        ),
    ] {
        let path = format!("{dir}/{file}");
        if let Err(e) = std::fs::write(&path, yaml) {
            eprintln!("cannot write {path}: {e}");
            std::process::exit(1);
        }
        println!("wrote {path}");
    }
}
