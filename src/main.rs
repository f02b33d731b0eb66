//! The `vllm-keda-scaler` command: parse the CLI, start logging, dispatch.

use clap::{Parser, Subcommand};

mod cli;

/// KEDA external scaler for vLLM, with its emulator, simulator and load tester.
#[derive(Debug, Parser)]
#[command(name = "vllm-keda-scaler", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve KEDA's external-scaler gRPC protocol (the production job).
    Serve(cli::serve::ServeArgs),
    /// Scrape vLLM endpoints (or saved bodies) twice and print the signals.
    Check(vllm_keda_tools::check::CheckArgs),
    /// Run a fleet of emulated vLLM replicas on loopback.
    Emulate(vllm_emulator::EmulateArgs),
    /// See it scale: emulated fleet, the real scaler, and a KEDA/HPA stand-in in one process.
    Demo(vllm_keda_tools::demo::DemoArgs),
    /// Replay a request trace through emulated replicas in virtual time under several policies.
    Simulate(vllm_keda_tools::simulate::SimulateArgs),
    /// Find a deployment's saturation point with the stepped open-loop load test.
    Loadtest(vllm_keda_tools::loadtest::LoadtestArgs),
    /// Send sequential warm-up requests, then write a ready file.
    Warmup(vllm_keda_tools::loadtest::WarmupArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The demo draws its own terminal view and sets up its own (quieter) logging.
    if !matches!(cli.command, Command::Demo(_)) {
        vllm_keda_service::telemetry::init_logging();
    }
    let result = match cli.command {
        Command::Serve(args) => vllm_keda_service::serve::run(args.into()),
        Command::Check(args) => vllm_keda_tools::check::run(args),
        Command::Emulate(args) => vllm_emulator::run(args),
        Command::Demo(args) => vllm_keda_tools::demo::run(args),
        Command::Simulate(args) => vllm_keda_tools::simulate::run(args),
        Command::Loadtest(args) => vllm_keda_tools::loadtest::run(args),
        Command::Warmup(args) => vllm_keda_tools::loadtest::run_warmup(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
