//! The store over real loopback sockets: every operation, concurrency, timeouts, bad
//! input from raw sockets, thousands of connections, and a server that dies mid-wait.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use lowcon_store::protocol::{self, Request, Response};
use lowcon_store::{ClientOptions, ServerOptions, StoreClient, StoreError, StoreServer};

fn server() -> StoreServer {
    StoreServer::start("127.0.0.1:0", ServerOptions::default()).unwrap()
}

fn client(s: &StoreServer) -> StoreClient {
    StoreClient::connect(s.local_addr().to_string(), ClientOptions::default()).unwrap()
}

const SHORT: Duration = Duration::from_millis(200);

#[test]
fn every_operation() {
    let s = server();
    let mut c = client(&s);
    c.ping().unwrap();
    c.set("a", b"1").unwrap();
    assert_eq!(c.get("a").unwrap(), b"1");
    assert_eq!(c.add("n", 5).unwrap(), 5);
    assert_eq!(c.add("n", -7).unwrap(), -2);
    assert_eq!(c.get("n").unwrap(), b"-2");
    // compare_set: absent + empty expected sets; mismatch returns the current value.
    assert_eq!(c.compare_set("cs", b"", b"x").unwrap(), b"x");
    assert_eq!(c.compare_set("cs", b"nope", b"y").unwrap(), b"x");
    assert_eq!(c.compare_set("cs", b"x", b"y").unwrap(), b"y");
    assert!(c.check(&["a", "n", "cs"]).unwrap());
    assert!(!c.check(&["a", "missing"]).unwrap());
    assert_eq!(c.num_keys().unwrap(), 3);
    c.multi_set(&[("m1", b"one"), ("m2", b""), ("m3", &[0u8, 255])]).unwrap();
    assert_eq!(c.multi_get(&["m3", "m1", "m2"], SHORT).unwrap(), vec![vec![0, 255], b"one".to_vec(), vec![]]);
    assert!(c.delete("m1").unwrap());
    assert!(!c.delete("m1").unwrap());
    assert_eq!(c.num_keys().unwrap(), 5);
    c.wait(&["a", "m2"], SHORT).unwrap();
}

#[test]
fn waits_time_out_naming_the_missing_keys() {
    let s = server();
    let mut c = client(&s);
    c.set("present", b"").unwrap();
    let t = Instant::now();
    let e = c.wait(&["present", "absent"], SHORT).unwrap_err();
    let took = t.elapsed();
    assert!(matches!(e, StoreError::Timeout { op: "wait", .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("\"absent\"") && !msg.contains("\"present\""), "{msg}");
    assert!(msg.contains(&s.local_addr().to_string()), "{msg}");
    assert!(took >= SHORT && took < Duration::from_secs(3), "{took:?}");
    let e = c.get_timeout("absent", SHORT).unwrap_err();
    assert!(matches!(e, StoreError::Timeout { op: "get", .. }), "{e:?}");
    let e = c.multi_get(&["present", "absent"], SHORT).unwrap_err();
    assert!(e.to_string().contains("\"absent\""), "{e}");
    // The connection is still usable after a timeout.
    c.ping().unwrap();
}

#[test]
fn a_wait_completes_when_another_client_sets_the_key() {
    let s = server();
    let addr = s.local_addr().to_string();
    let waiter = std::thread::spawn(move || {
        let mut c = StoreClient::connect(addr, ClientOptions::default()).unwrap();
        let t = Instant::now();
        let v = c.get_timeout("late", Duration::from_secs(20)).unwrap();
        (v, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(150));
    client(&s).set("late", b"here").unwrap();
    let (v, took) = waiter.join().unwrap();
    assert_eq!(v, b"here");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn many_concurrent_clients() {
    let s = server();
    let n = 64;
    let start = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (addr, start) = (s.local_addr().to_string(), start.clone());
            std::thread::spawn(move || {
                let mut c = StoreClient::connect(addr, ClientOptions::default()).unwrap();
                start.wait();
                for j in 0..50 {
                    c.add("counter", 1).unwrap();
                    c.set(&format!("k/{i}/{j}"), format!("{i}:{j}").as_bytes()).unwrap();
                }
                for j in 0..50 {
                    assert_eq!(c.get(&format!("k/{i}/{j}")).unwrap(), format!("{i}:{j}").as_bytes());
                }
                c.barrier("end", n, Duration::from_secs(30)).unwrap();
                c.get("counter").unwrap()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), format!("{}", n * 50).as_bytes());
    }
    assert_eq!(client(&s).num_keys().unwrap() as usize, 1 + n * 50 + 2);
}

#[test]
fn barrier_all_gather_and_send_recv_are_reusable() {
    let s = server();
    let n = 5;
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let addr = s.local_addr().to_string();
            std::thread::spawn(move || {
                let mut c = StoreClient::connect(addr, ClientOptions::default()).unwrap();
                for round in 0..3u8 {
                    c.barrier("b", n, Duration::from_secs(20)).unwrap();
                    let all = c.all_gather("ids", rank, n, &[rank as u8, round], Duration::from_secs(20)).unwrap();
                    assert_eq!(all, (0..n).map(|r| vec![r as u8, round]).collect::<Vec<_>>());
                    let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
                    c.send("ring", rank, next, &[rank as u8, round]).unwrap();
                    assert_eq!(c.recv("ring", prev, rank, Duration::from_secs(20)).unwrap(), vec![prev as u8, round]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn barrier_times_out_when_a_rank_is_missing() {
    let s = server();
    let mut c = client(&s);
    let e = c.barrier("lonely", 2, SHORT).unwrap_err();
    assert!(matches!(e, StoreError::Timeout { op: "barrier", .. }), "{e:?}");
    assert!(e.to_string().contains("1 of 2 ranks arrived"), "{e}");
}

#[test]
fn oversized_requests_are_refused_before_sending() {
    let s = server();
    let mut c = client(&s);
    let key = "k".repeat(protocol::MAX_KEY + 1);
    let e = c.set(&key, b"").unwrap_err();
    assert!(matches!(e, StoreError::InvalidArgument(_)) && e.to_string().contains("key of 4097"), "{e}");
    let e = c.set("big", &vec![0u8; protocol::MAX_VALUE + 1]).unwrap_err();
    assert!(e.to_string().contains("\"big\"") && e.to_string().contains("value of"), "{e}");
    c.set("max", &vec![7u8; protocol::MAX_VALUE]).unwrap();
    assert_eq!(c.get("max").unwrap().len(), protocol::MAX_VALUE);
}

#[test]
fn add_on_a_non_integer_is_an_error_and_the_client_recovers() {
    let s = server();
    let mut c = client(&s);
    c.set("text", b"hello").unwrap();
    let e = c.add("text", 1).unwrap_err();
    assert!(
        matches!(e, StoreError::Server { op: "add", .. }) && e.to_string().contains("not a decimal integer"),
        "{e}"
    );
    assert_eq!(c.get("text").unwrap(), b"hello");
    c.set("max", i64::MAX.to_string().as_bytes()).unwrap();
    assert!(c.add("max", 1).unwrap_err().to_string().contains("overflows"));
}

#[test]
fn tokens_are_checked() {
    let opts = ServerOptions { token: Some(b"s3cret".to_vec()), ..ServerOptions::default() };
    let s = StoreServer::start("127.0.0.1:0", opts).unwrap();
    let addr = s.local_addr().to_string();
    let quick = |token: Option<&[u8]>| ClientOptions {
        token: token.map(|t| t.to_vec()),
        connect_timeout: Duration::from_secs(2),
        ..ClientOptions::default()
    };
    let e = StoreClient::connect(addr.clone(), quick(Some(b"wrong"))).unwrap_err();
    assert!(matches!(e, StoreError::Refused { .. }) && e.to_string().contains("token"), "{e}");
    assert!(StoreClient::connect(addr.clone(), quick(None)).is_err());
    StoreClient::connect(addr, quick(Some(b"s3cret"))).unwrap().ping().unwrap();
}

#[test]
fn connect_retries_until_the_server_starts_then_times_out_clearly() {
    // Find a free port, then start the server on it only after the client began trying.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let a = addr.clone();
    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        StoreServer::start(&a, ServerOptions::default()).unwrap()
    });
    let mut c =
        StoreClient::connect(addr, ClientOptions { connect_timeout: Duration::from_secs(10), ..Default::default() })
            .unwrap();
    c.ping().unwrap();
    drop(starter.join().unwrap());

    let dead =
        format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let e =
        StoreClient::connect(dead.clone(), ClientOptions { connect_timeout: SHORT, ..Default::default() }).unwrap_err();
    assert!(matches!(e, StoreError::Connect { attempts, .. } if attempts > 1), "{e:?}");
    assert!(e.to_string().contains(&dead), "{e}");
}

#[test]
fn server_shutdown_mid_wait_is_an_error_not_a_hang() {
    let s = server();
    let addr = s.local_addr().to_string();
    let waiter = std::thread::spawn(move || {
        let mut c = StoreClient::connect(addr, ClientOptions::default()).unwrap();
        let t = Instant::now();
        (c.get_timeout("never", Duration::from_secs(60)), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    s.shutdown();
    let (r, took) = waiter.join().unwrap();
    let e = r.unwrap_err();
    assert!(matches!(e, StoreError::Disconnected { op: "get", .. }), "{e:?}");
    assert!(e.to_string().contains("\"never\""), "{e}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn an_interrupter_breaks_off_a_wait_from_another_thread() {
    let s = server();
    let c = client(&s);
    let stop = c.interrupter();
    let waiter = std::thread::spawn(move || {
        let mut c = c;
        let t = Instant::now();
        let first = c.get_timeout("never", Duration::from_secs(60));
        // Interrupted for good: a later call fails at once too, without reconnecting.
        let later = c.get_timeout("never", Duration::from_secs(60));
        (first, later, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    stop.interrupt();
    let (first, later, took) = waiter.join().unwrap();
    assert!(first.is_err() && later.is_err(), "{first:?} {later:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The server and other clients are unaffected.
    let mut other = client(&s);
    other.set("k", b"v").unwrap();
    assert_eq!(other.get_timeout("k", Duration::from_secs(1)).unwrap(), b"v");
}

// ---- raw-socket abuse: the server must answer or close, and keep serving others ----

fn raw(s: &StoreServer) -> TcpStream {
    let t = TcpStream::connect(s.local_addr()).unwrap();
    // Split writes (length, then body) must not wait out Nagle + delayed ACK.
    t.set_nodelay(true).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    t
}

fn hello(t: &mut TcpStream) {
    t.write_all(&protocol::encode_hello(b"")).unwrap();
    let mut w = [0u8; 9];
    t.read_exact(&mut w).unwrap();
    assert_eq!(w[6], protocol::HS_OK);
}

/// Reads one reply frame, or `None` if the server closed the connection.
fn read_reply(t: &mut TcpStream) -> Option<Response> {
    let mut len = [0u8; 4];
    t.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    t.read_exact(&mut body).ok()?;
    Some(Response::decode(&body).unwrap())
}

fn closed(t: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(t.read(&mut b), Ok(0) | Err(_))
}

fn still_serving(s: &StoreServer) {
    let mut c = client(s);
    c.set("alive", b"yes").unwrap();
    assert_eq!(c.get("alive").unwrap(), b"yes");
}

#[test]
fn malformed_frames_get_an_error_and_the_server_goes_on() {
    let s = StoreServer::start("127.0.0.1:0", ServerOptions::default()).unwrap();
    // Unknown op code.
    let mut t = raw(&s);
    hello(&mut t);
    t.write_all(&[1, 0, 0, 0, 99]).unwrap();
    match read_reply(&mut t) {
        Some(Response::Error(m)) => assert!(m.contains("unknown op code 99"), "{m}"),
        r => panic!("{r:?}"),
    }
    assert!(closed(&mut t));
    // A key length that runs past the frame.
    let mut t = raw(&s);
    hello(&mut t);
    t.write_all(&[5, 0, 0, 0, 1, 200, 0, 0, 0]).unwrap();
    match read_reply(&mut t) {
        Some(Response::Error(m)) => assert!(m.contains("truncated"), "{m}"),
        r => panic!("{r:?}"),
    }
    // A frame length over the limit.
    let mut t = raw(&s);
    hello(&mut t);
    t.write_all(&u32::MAX.to_le_bytes()).unwrap();
    match read_reply(&mut t) {
        Some(Response::Error(m)) => assert!(m.contains("frame of 4294967295 exceeds"), "{m}"),
        r => panic!("{r:?}"),
    }
    // Trailing bytes after a valid request.
    let mut t = raw(&s);
    hello(&mut t);
    let mut body = Request::Ping.encode();
    body.push(0);
    t.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
    t.write_all(&body).unwrap();
    assert!(matches!(read_reply(&mut t), Some(Response::Error(m)) if m.contains("unexpected byte")));
    still_serving(&s);
}

#[test]
fn bad_handshakes_are_refused() {
    let s = server();
    // Not a lowcon client at all.
    let mut t = raw(&s);
    t.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert!(closed(&mut t));
    // Another protocol version.
    let mut t = raw(&s);
    let mut h = protocol::encode_hello(b"");
    h[4] = 99;
    t.write_all(&h).unwrap();
    let mut w = [0u8; 9];
    t.read_exact(&mut w).unwrap();
    assert_eq!(w[6], protocol::HS_BAD_VERSION);
    still_serving(&s);
}

#[test]
fn silent_and_half_sent_clients_only_hurt_themselves() {
    let opts = ServerOptions {
        handshake_timeout: Duration::from_millis(200),
        frame_timeout: Duration::from_millis(200),
        ..ServerOptions::default()
    };
    let s = StoreServer::start("127.0.0.1:0", opts).unwrap();
    // Connects and sends nothing: dropped after the handshake timeout.
    let mut silent = raw(&s);
    // Starts a frame and stalls: dropped after the frame timeout.
    let mut stalled = raw(&s);
    hello(&mut stalled);
    stalled.write_all(&[100, 0, 0, 0, 1, 2]).unwrap();
    // Disconnects mid-frame.
    let mut gone = raw(&s);
    hello(&mut gone);
    gone.write_all(&[100, 0, 0, 0, 1]).unwrap();
    drop(gone);
    // Disconnects mid-wait.
    let mut waiting = raw(&s);
    hello(&mut waiting);
    let body = Request::Wait { keys: vec![b"never".to_vec()], timeout_ms: 60_000 }.encode();
    waiting.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
    waiting.write_all(&body).unwrap();
    drop(waiting);

    still_serving(&s);
    let t = Instant::now();
    assert!(closed(&mut silent));
    assert!(closed(&mut stalled));
    assert!(t.elapsed() < Duration::from_secs(4));
    still_serving(&s);
}

#[test]
fn thousands_of_connections() {
    // Raise the soft descriptor limit to the hard one (both ends live in this process).
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    let n = 2000.min((hard as usize).saturating_sub(200) / 2);
    let s = server();
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let mut t = raw(&s);
        hello(&mut t);
        if i % 2 == 0 {
            // Half of them also make a call.
            let body = Request::Add { key: b"conns".to_vec(), delta: 1 }.encode();
            t.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
            t.write_all(&body).unwrap();
            assert!(matches!(read_reply(&mut t), Some(Response::Int(_))));
        }
        conns.push(t);
    }
    let mut c = client(&s);
    assert_eq!(c.get("conns").unwrap(), n.div_ceil(2).to_string().as_bytes());
    drop(conns);
    still_serving(&s);
    assert!(n >= 500, "only {n} connections possible under this descriptor limit");
}
