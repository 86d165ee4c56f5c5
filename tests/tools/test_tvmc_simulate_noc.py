import json

from tvm_chiplet.tools.tvmc import main


def test_simulate_noc_reports_latency_and_throughput_as_json(capsys):
    assert main(["simulate-noc", "--topology", "mesh-4x4", "--traffic", "uniform",
                 "--rate", "0.05", "--cycles", "3000", "--warmup", "500", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["avg_packet_latency"] > 0
    assert 0.03 < result["accepted_throughput"] < 0.07
    assert result["saturated"] is False


def test_simulate_noc_rejects_a_bad_rate_and_traffic(capsys):
    assert main(["simulate-noc", "--rate", "1.5"]) == 2
    assert "1.5" in capsys.readouterr().err
    assert main(["simulate-noc", "--traffic", "tornado-ish"]) == 2
    err = capsys.readouterr().err
    assert "tornado-ish" in err and "uniform" in err


def test_run_with_flit_network(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    assert main(["model", "small-cnn", "-o", str(model)]) == 0
    assert main(["compile", str(model), "--target", "chiplet/quad-2x2",
                 "-o", str(tmp_path / "c.tar")]) == 0
    assert main(["run", str(tmp_path / "c.tar"), "--network", "flit", "--print-time"]) == 0
    assert "device:" in capsys.readouterr().out


def test_rate_sweep_runs_each_rate_and_reports_in_order(capsys):
    assert main(["simulate-noc", "--topology", "mesh-4x4", "--rates", "0.02,0.05",
                 "--cycles", "2000", "--warmup", "200", "--jobs", "1", "--json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert [row["rate"] for row in rows] == [0.02, 0.05]
    assert rows[0]["accepted_throughput"] < rows[1]["accepted_throughput"]
    assert "[simulate-noc] 2/2" in captured.err


def test_router_parameters_from_the_command_line(capsys):
    argv = ["simulate-noc", "--topology", "mesh-4x4", "--rate", "0.01", "--cycles", "4000",
            "--warmup", "500", "--json"]
    assert main([*argv, "--routing-delay", "1"]) == 0
    fast = json.loads(capsys.readouterr().out)["avg_packet_latency"]
    assert main([*argv, "--routing-delay", "4"]) == 0
    slow = json.loads(capsys.readouterr().out)["avg_packet_latency"]
    assert slow > fast + 3
    assert main([*argv, "--num-vcs", "0"]) == 2
    assert "num_vcs" in capsys.readouterr().err


def test_allocator_from_the_command_line(capsys):
    argv = ["simulate-noc", "--topology", "mesh-4x4", "--rate", "0.5", "--cycles", "2000",
            "--warmup", "200", "--json"]
    results = {}
    for allocator in ("separable", "greedy"):
        assert main([*argv, "--allocator", allocator]) == 0
        results[allocator] = json.loads(capsys.readouterr().out)
    assert results["separable"] != results["greedy"]
    assert main([*argv, "--allocator", "wavefront"]) == 2
    assert "wavefront" in capsys.readouterr().err
