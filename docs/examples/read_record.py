from pathlib import Path

from fedbench.records import read_record_file

path = next(Path("results/tiny_vision/fedra").glob("*.json"))
rec = read_record_file(path)  # validated, and an older record upgraded to the current schema
run, res, cost = rec["run"], rec["results"], rec["cost"]
config = run["run_config"]

print(rec["status"], run["run_id"], run["method"], run["task"], config["setting"], run["resource_label"])
print(f"fedbench {run['fedbench_version']}, {run['method']} rule version {run['method_version']}, "
      f"{config['rounds']} rounds, seed {config['seed']}")
print(f"{res['metric_name']} final {res['final']:.4f}, best {res['best']:.4f} at round {res['best_round']}")
for point in res["curve"]:
    print(f"  round {point['round']}: {point['metric']:.4f} (train loss {point['train_loss']:.3f})")
print("per domain:", res["per_domain"])
print("clients per tier:", run["tier_counts"])
print(f"TFLOPs/step {cost['tflops_per_step']['mean']:.6f} "
      f"(weakest tier {cost['tflops_per_step']['by_tier']['0']['mean']:.6f}), "
      f"MB/client-round {cost['traffic_mb_per_client_round']['total']:.3f}, "
      f"s/round {cost['seconds_per_round']:.2f}")
