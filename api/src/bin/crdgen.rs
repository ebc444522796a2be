//! Writes the Tenant CRD YAML (`api/crd/tenant.yaml`) from the Rust type.

fn main() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/crd/tenant.yaml");
    if let Err(e) = std::fs::write(path, teapot_api::tenant::crd_yaml()) {
        eprintln!("cannot write {path}: {e}");
        std::process::exit(1);
    }
    println!("wrote {path}");
}
