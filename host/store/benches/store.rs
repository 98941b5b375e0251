//! Store benchmark: op latency (p50/p99) for set/get/add over loopback with 1 and 64
//! concurrent clients, and the time for N simulated ranks to rendezvous (each sets its
//! key, waits for all N, then a barrier) at N = 8, 64, 256.
//!
//!     cargo bench -p lowcon-store --bench store            # table
//!     cargo bench -p lowcon-store --bench store -- --json  # plus one JSON line per row
//!
//! Results and the machine they came from: docs/store.md.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use lowcon_store::{ClientOptions, ServerOptions, StoreClient, StoreServer};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn connect(s: &StoreServer) -> StoreClient {
    StoreClient::connect(s.local_addr().to_string(), ClientOptions::default()).expect("connect")
}

/// Runs `ops` of one kind on each of `clients` concurrent clients; returns all latencies.
fn op_latencies(s: &StoreServer, op: &'static str, clients: usize, ops: usize) -> Vec<Duration> {
    let start = Arc::new(Barrier::new(clients));
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let mut client = connect(s);
            let start = start.clone();
            std::thread::spawn(move || {
                let key = format!("bench/{op}/{c}");
                client.set(&key, b"0").unwrap();
                let value = vec![0x5au8; 64];
                for _ in 0..ops / 10 {
                    client.set(&key, &value).unwrap(); // warm-up
                }
                start.wait();
                let mut lat = Vec::with_capacity(ops);
                for _ in 0..ops {
                    let t = Instant::now();
                    match op {
                        "set" => client.set(&key, &value).unwrap(),
                        "get" => drop(client.get(&key).unwrap()),
                        "add" => drop(client.add(&format!("{key}/n"), 1).unwrap()),
                        _ => unreachable!(),
                    }
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all: Vec<Duration> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    all.sort();
    all
}

/// One rendezvous of `n` ranks; returns the time until the last rank is through.
fn rendezvous(s: &StoreServer, n: usize, round: usize) -> Duration {
    let start = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let mut c = connect(s);
            let start = start.clone();
            std::thread::spawn(move || {
                let keys: Vec<String> = (0..n).map(|r| format!("rdzv/{n}/{round}/{r}")).collect();
                let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                start.wait();
                let t = Instant::now();
                c.set(&keys[rank], format!("addr-of-{rank}").as_bytes()).unwrap();
                c.wait(&refs, Duration::from_secs(60)).unwrap();
                c.barrier(&format!("rdzv/{n}/{round}"), n, Duration::from_secs(60)).unwrap();
                t.elapsed()
            })
        })
        .collect();
    start.wait();
    threads.into_iter().map(|t| t.join().unwrap()).max().unwrap()
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let s = StoreServer::start("127.0.0.1:0", ServerOptions::default()).expect("server");
    println!(
        "lowcon-store benchmark, loopback, {} CPU(s)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("{:<5} {:>8} {:>9} {:>10} {:>10}", "op", "clients", "ops", "p50 (us)", "p99 (us)");
    for clients in [1usize, 64] {
        for op in ["set", "get", "add"] {
            let ops = if clients == 1 { 20_000 } else { 500 };
            let lat = op_latencies(&s, op, clients, ops);
            let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
            println!("{op:<5} {clients:>8} {:>9} {:>10.1} {:>10.1}", lat.len(), us(p50), us(p99));
            if json {
                println!(
                    "{{\"bench\":\"op\",\"op\":\"{op}\",\"clients\":{clients},\"ops\":{},\"p50_us\":{:.2},\"p99_us\":{:.2}}}",
                    lat.len(),
                    us(p50),
                    us(p99)
                );
            }
        }
    }
    println!();
    println!("{:<6} {:>7} {:>12} {:>12}", "ranks", "rounds", "median (ms)", "max (ms)");
    for n in [8usize, 64, 256] {
        let rounds = 7;
        let mut t: Vec<Duration> = (0..rounds).map(|r| rendezvous(&s, n, r)).collect();
        t.sort();
        let (med, max) = (t[rounds / 2], t[rounds - 1]);
        println!("{n:<6} {rounds:>7} {:>12.2} {:>12.2}", med.as_secs_f64() * 1e3, max.as_secs_f64() * 1e3);
        if json {
            println!(
                "{{\"bench\":\"rendezvous\",\"ranks\":{n},\"rounds\":{rounds},\"median_ms\":{:.3},\"max_ms\":{:.3}}}",
                med.as_secs_f64() * 1e3,
                max.as_secs_f64() * 1e3
            );
        }
    }
}
