//! The speaker against a second router implementation: BIRD 2 in the
//! router namespace of the shared topology (tests/netns), two replicas
//! announcing one /32 and one /128 (IPv6 over multiprotocol BGP). BIRD's
//! kernel protocols with `merge paths on` put both replicas into the
//! router's kernel table as ECMP next hops; a graceful stop first lowers
//! the leaving replica's path (BIRD's import filter honours
//! GRACEFUL_SHUTDOWN, as docs/announce.md shows), then withdraws it.
//! With BIRD's `protocol bfd` and `bfd=100x3`, a frozen replica is cut
//! by BFD. With `password` in BIRD's template, a replica with the same
//! TCP-MD5 password in `password-file=` is a next hop.
//!
//! Needs root, iproute2 and Debian's `bird2`; without them the test prints
//! why and passes, unless `TEAPOT_REQUIRE_NETNS=1` (CI) makes that a
//! failure (tests/netns/mod.rs).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

mod netns;

use netns::{LINKS, ROUTER_ASN, Replicas, SPEAKER_ASN, VIP4, VIP6};

fn bird_missing() -> Option<String> {
    for tool in ["bird", "birdc"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} missing (apt-get install bird2)"));
        }
    }
    None
}

/// BIRD in the router namespace of [`Replicas`], killed on drop before the
/// namespaces go.
struct Lab {
    bird: Option<Child>,
    replicas: Replicas,
}

netns::labs_are_replicas!(Lab);

/// The router's configuration: every replica address declared (BIRD 2.0
/// has no neighbour ranges), one BGP protocol per replica and family, the
/// kernel tables fed with merged paths; every session signed with
/// `password` (TCP-MD5) when there is one.
fn bird_conf(log: &str, bfd: bool, password: Option<&str>) -> String {
    let (bfd_protocol, bfd_on) = if bfd {
        (
            "protocol bfd {\n  interface \"*\" {\n    min rx interval 100 ms;\n    min tx interval 100 ms;\n    multiplier 3;\n  };\n}\n",
            "  bfd on;\n",
        )
    } else {
        ("", "")
    };
    let password = password
        .map(|p| format!("  password \"{p}\";\n"))
        .unwrap_or_default();
    let mut conf = format!(
        r#"log "{log}" all;
router id {rid};

protocol device {{ }}
{bfd_protocol}
protocol kernel kernel4 {{
  ipv4 {{ export all; }};
  merge paths on;
}}

protocol kernel kernel6 {{
  ipv6 {{ export all; }};
  merge paths on;
}}

# RFC 8326: a path marked GRACEFUL_SHUTDOWN loses to every other path.
filter replicas_in {{
  if (65535, 0) ~ bgp_community then bgp_local_pref = 0;
  accept;
}}

template bgp replica {{
  local as {ROUTER_ASN};
  hold time 3;
  keepalive time 1;
  connect retry time 1;
  error wait time 1, 5;
{bfd_on}{password}}}
"#,
        rid = LINKS[0].router4,
    );
    for (i, link) in LINKS.iter().enumerate() {
        for (family, addr) in [("ipv4", link.speaker4), ("ipv6", link.speaker6)] {
            conf.push_str(&format!(
                "protocol bgp replica{i}_{family} from replica {{\n  neighbor {addr} as {SPEAKER_ASN};\n  {family} {{ import filter replicas_in; export none; }};\n}}\n"
            ));
        }
    }
    conf
}

static LABS: AtomicUsize = AtomicUsize::new(0);

impl Lab {
    fn new(bfd: bool) -> Lab {
        Lab::start("tpbd", bfd, None)
    }

    /// BIRD with `password` on every session, its namespaces and files
    /// named by `prefix`.
    fn start(prefix: &str, bfd: bool, password: Option<&str>) -> Lab {
        let n = LABS.fetch_add(1, Ordering::Relaxed);
        let replicas = Replicas::new(&format!("{prefix}{}b{n}", std::process::id()));
        let conf = replicas.dir.path().join("bird.conf");
        let log = replicas.dir.path().join("bird.log");
        std::fs::write(&conf, bird_conf(log.to_str().unwrap(), bfd, password)).unwrap();
        let socket = replicas.dir.path().join("bird.ctl");
        let bird = Command::new("ip")
            .args(["netns", "exec", &replicas.router, "bird", "-f"])
            .arg("-c")
            .arg(&conf)
            .arg("-s")
            .arg(&socket)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let lab = Lab {
            bird: Some(bird),
            replicas,
        };
        lab.wait("BIRD's control socket", || {
            lab.birdc("show protocols")
                .contains("replica1_ipv6")
                .then_some(())
        });
        lab
    }

    /// Both replicas announcing (with `bfd=100x3` when `bfd`), the kernel
    /// using both (replica 0 with `graceful_wait_ms`).
    fn with_both_replicas(bfd: bool, graceful_wait_ms: u64) -> Lab {
        let mut lab = Lab::new(bfd);
        let options = if bfd { ",bfd=100x3" } else { "" };
        lab.start_speaker(0, options, graceful_wait_ms);
        lab.start_speaker(1, options, 3000);
        for vip in [VIP4, VIP6] {
            lab.wait(&format!("two kernel next hops for {vip}"), || {
                lab.ecmp(vip).then_some(())
            });
        }
        lab
    }

    fn birdc(&self, command: &str) -> String {
        let out = Command::new("birdc")
            .arg("-s")
            .arg(self.dir.path().join("bird.ctl"))
            .args(command.split(' '))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait<T>(&self, what: &str, check: impl FnMut() -> Option<T>) -> T {
        netns::wait(what, || self.dump(), check)
    }

    fn dump(&self) -> String {
        let mut out = self.birdc("show protocols");
        out.push_str(&self.birdc("show route all"));
        out.push_str(&self.replicas.dump());
        out.push_str(
            &std::fs::read_to_string(self.dir.path().join("bird.log")).unwrap_or_default(),
        );
        out
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.dump());
        }
        if let Some(mut bird) = self.bird.take() {
            let _ = bird.kill();
            let _ = bird.wait();
        }
    }
}

#[test]
fn bird_spreads_both_addresses_over_both_replicas_and_a_graceful_stop_leaves_one() {
    if !netns::runnable(
        "bird_spreads_both_addresses_over_both_replicas_and_a_graceful_stop_leaves_one",
        bird_missing,
    ) {
        return;
    }
    // A wait long enough that the path moves before the withdrawal on a
    // loaded machine too.
    let mut lab = Lab::with_both_replicas(false, 10_000);

    lab.signal(0, "-TERM");
    let leaving = LINKS[0].speaker4;
    // GRACEFUL_SHUTDOWN: BIRD prefers the other path, the kernel route
    // has one next hop, and the marked path is still announced.
    lab.wait("replica 1 alone for the IPv4 address", || {
        lab.only(1, VIP4).then_some(())
    });
    let routes = lab.birdc(&format!("show route for {VIP4}/32 all"));
    assert!(
        routes.contains(leaving) && routes.contains("(65535,0)"),
        "the leaving replica's marked path is withdrawn only after the wait: {routes}"
    );
    lab.wait("replica 1 alone for the IPv6 address", || {
        lab.only(1, VIP6).then_some(())
    });
    let speaker = lab.take_speaker(0);
    let status = netns::wait_exit(speaker, "speaker 0", || lab.dump());
    assert!(status.success(), "graceful stop exits cleanly: {status}");
    lab.wait("no path from the stopped replica", || {
        (!lab
            .birdc(&format!("show route for {VIP4}/32 all"))
            .contains(leaving))
        .then_some(())
    });
    assert!(lab.only(1, VIP4) && lab.only(1, VIP6));
}

#[test]
fn with_bfd_bird_cuts_a_frozen_replica() {
    if !netns::runnable("with_bfd_bird_cuts_a_frozen_replica", bird_missing) {
        return;
    }
    let lab = Lab::with_both_replicas(true, 3000);
    lab.wait("four BFD sessions Up at the router", || {
        let sessions = lab.birdc("show bfd sessions");
        (sessions.matches(" Up ").count() == 4).then_some(())
    });

    lab.signal(0, "-STOP");
    lab.wait("replica 1 alone for the IPv4 address", || {
        lab.only(1, VIP4).then_some(())
    });
    // Why BIRD dropped the frozen replica: BFD, not the hold timer.
    let protocol = lab.wait("replica 0's IPv4 session down", || {
        let out = lab.birdc("show protocols all replica0_ipv4");
        (!out.contains("Established")).then_some(out)
    });
    assert!(protocol.contains("BFD session down"), "{protocol}");
    lab.signal(0, "-KILL");
}

#[test]
fn with_birds_password_the_sessions_establish_and_the_route_is_installed() {
    if !netns::runnable(
        "with_birds_password_the_sessions_establish_and_the_route_is_installed",
        bird_missing,
    ) {
        return;
    }
    let password = "s3cret-shared-with-bird";
    let mut lab = Lab::start("md5", false, Some(password));
    let file = lab.dir.path().join("speaker0.password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    lab.start_speaker(0, &format!(",password-file={}", file.display()), 3000);
    for vip in [VIP4, VIP6] {
        lab.wait(&format!("replica 0 the next hop for {vip}"), || {
            lab.only(0, vip).then_some(())
        });
    }
    for protocol in ["replica0_ipv4", "replica0_ipv6"] {
        let out = lab.birdc(&format!("show protocols all {protocol}"));
        assert!(out.contains("Established"), "{out}");
    }
}
