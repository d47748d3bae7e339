//! Runs one built-in scenario and prints its result as `dirq sim --json`
//! does, with only the simulator built:
//! `cargo run --release -p dirq-sim --example scenario_json -- did-udp-rx 1`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(name), seed) = (args.next(), args.next()) else {
        eprintln!("usage: scenario_json <built-in scenario> [seed]");
        return ExitCode::FAILURE;
    };
    let Ok(seed) = seed.as_deref().unwrap_or("1").parse() else {
        eprintln!("the seed must be a number");
        return ExitCode::FAILURE;
    };
    let options = dirq_sim::RunOptions {
        seed,
        profile: None,
        trace: false,
    };
    let result = dirq_sim::scenario::builtin(&name)
        .map_err(|err| err.to_string())
        .and_then(|scenario| {
            dirq_sim::run_scenario(&scenario, &options).map_err(|err| err.to_string())
        })
        .and_then(|output| {
            serde_json::to_string_pretty(&output.result).map_err(|err| err.to_string())
        });
    match result {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{err}");
            ExitCode::FAILURE
        }
    }
}
