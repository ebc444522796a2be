//! Pingora with nothing of teapot's: one fixed upstream, no routing, no
//! edge checks, no metrics. The floor under teapot's per-request cost.
//! `bare_pingora LISTEN UPSTREAM THREADS`

use std::sync::Arc;

use async_trait::async_trait;
use pingora_core::server::configuration::ServerConf;
use pingora_core::services::Service as _;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_proxy::{ProxyHttp, Session};

struct Fixed(String);

#[async_trait]
impl ProxyHttp for Fixed {
    type CTX = ();
    fn new_ctx(&self) {}
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut (),
    ) -> pingora_error::Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.0.as_str(),
            false,
            String::new(),
        )))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args[3].parse().unwrap();
    // 0: one current-thread runtime (no work stealing, no cross-thread wake-ups).
    let rt = if threads == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .unwrap()
    };
    rt.block_on(async {
        let conf = Arc::new(ServerConf::default());
        let app = pingora_proxy::http_proxy(&conf, Fixed(args[2].clone()));
        let mut service = pingora_core::services::listening::Service::new("bare".into(), app);
        service.add_tcp(&args[1]);
        let (_tx, rx) = tokio::sync::watch::channel(false);
        service.start_service(None, rx, 1).await;
    });
}
