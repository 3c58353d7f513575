package main

import (
	"context"
	"fmt"
)

// analyst makes the calls of a data analyst's session, as an agent would
// make them for an analyst planning next year from this year's sales. Each
// call is one run_python call: its arguments, then the Python it runs.
func analyst(ctx context.Context, a *agent, salesCSV string) error {
	if err := analyse(ctx, a, salesCSV); err != nil {
		return err
	}
	return forkAndReport(ctx, a)
}

// analyse passes the sales in, charts them, snapshots the session and
// takes a risky step (calls 1 to 3).
func analyse(ctx context.Context, a *agent, salesCSV string) error {
	// 1. Pass the CSV in (it lands read-only in /tmp/inputs), load it with
	// pandas, chart it. The session "analysis" keeps df for the next calls.
	if _, err := a.call(ctx, "load the sales and chart them", map[string]any{
		"session": "analysis",
		"inputs":  []map[string]any{{"path": "sales.csv", "text": salesCSV}},
		"code": `
import matplotlib.pyplot as plt
import pandas as pd
from mcp_tools import show

df = pd.read_csv("/tmp/inputs/sales.csv")
print(f"{len(df)} rows, {df.month.min()} to {df.month.max()}, regions: {', '.join(sorted(df.region.unique()))}")
print(df.groupby("region")["revenue"].sum().to_string())
fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
df.pivot(index="month", columns="region", values="revenue").plot(ax=ax, marker="o")
ax.set_title("Revenue by month")
show(fig, name="revenue.png");
`}); err != nil {
		return err
	}

	// 2. Prepare the working data in a file (a snapshot keeps files, not
	// variables), and snapshot the session once the call has ended: the
	// next step changes that file for good.
	if _, err := a.call(ctx, "prepare the working data, then snapshot", map[string]any{
		"session":  "analysis",
		"snapshot": "prepared",
		"code": `
import os

df = df.sort_values(["region", "month"])
df["growth"] = df.groupby("region")["revenue"].pct_change()
os.makedirs("/tmp/work", exist_ok=True)
df.to_pickle("/tmp/work/sales.pkl")
print("mean monthly growth, %:")
print(df.groupby("region")["growth"].mean().mul(100).round(1).to_string())
`}); err != nil {
		return err
	}

	// 3. The risky step: west is folded into north, in place.
	_, err := a.call(ctx, "the risky step: fold west into north", map[string]any{
		"session": "analysis",
		"code": `
df.loc[df.region == "west", "region"] = "north"
df = df.groupby(["month", "region"], as_index=False)["revenue"].sum()
df.to_pickle("/tmp/work/sales.pkl")
print("regions now:", ", ".join(sorted(df.region.unique())))
`})
	return err
}

// forkAndReport forks the session from its snapshot for a what-if, goes
// on with the first one, and chains the what-if's output into a report
// (calls 4 to 6).
func forkAndReport(ctx context.Context, a *agent) error {
	// 4. A what-if from before that step: a new session restored from the
	// snapshot (a fork: "analysis" goes on as it is). It simulates next
	// year per region and writes the simulations to /tmp/outputs: a file
	// over artifacts.max_bytes_inline comes back by reference, not into
	// the agent's context.
	whatIf, err := a.call(ctx, "what-if, from the snapshot: simulate next year", map[string]any{
		"session": "what-if",
		"restore": "prepared",
		"code": `
import numpy as np
import pandas as pd

df = pd.read_pickle("/tmp/work/sales.pkl")
print("regions:", ", ".join(sorted(df.region.unique())))
rng = np.random.default_rng(2027)
runs = 50_000
sims = []
for region, g in df.groupby("region"):
    # Twelve months of growth drawn from the region's own months, 50,000 times.
    draws = rng.choice(g["growth"].dropna().to_numpy(), size=(runs, 12))
    revenue = g["revenue"].iloc[-1] * np.cumprod(1 + draws, axis=1)
    sims.append(pd.DataFrame({"region": region, "run": np.arange(runs), "revenue": revenue.sum(axis=1).round(1)}))
sims = pd.concat(sims)
sims.to_csv("/tmp/outputs/forecast.csv", index=False)
print(f"{len(sims)} simulated years in forecast.csv")
`})
	if err != nil {
		return err
	}
	forecast, ok := whatIf.links["forecast.csv"]
	if !ok {
		return fmt.Errorf("forecast.csv did not come back by reference: serve with a policy that sets artifacts.dir, such as examples/policies/datascience.yaml")
	}

	// 5. Meanwhile the first session goes on from where it was: its
	// variables, and its own /tmp, untouched by the fork.
	if _, err := a.call(ctx, "the first session goes on", map[string]any{
		"session": "analysis",
		"code": `
kept = pd.read_pickle("/tmp/work/sales.pkl")
print("analysis still has:", ", ".join(sorted(df.region.unique())), "in df,", ", ".join(sorted(kept.region.unique())), "in its file")
`}); err != nil {
		return err
	}

	// 6. A fresh run reads the what-if's file by its URI: the bridge copies
	// it in; the agent passed only its name.
	_, err = a.call(ctx, "report: read the forecast by its URI", map[string]any{
		"inputs": []map[string]any{{"path": "forecast.csv", "uri": forecast}},
		"code": `
import matplotlib.pyplot as plt
import pandas as pd
from mcp_tools import show

sims = pd.read_csv("/tmp/inputs/forecast.csv")
print(f"{len(sims)} rows from the what-if")
q = sims.groupby("region")["revenue"].quantile([0.1, 0.5, 0.9]).unstack().round(0)
q.columns = ["p10", "p50", "p90"]
show(q)
fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
for region, g in sims.groupby("region"):
    ax.hist(g["revenue"], bins=60, alpha=0.6, label=region)
ax.set_title("Next year's revenue, simulated")
ax.legend()
show(fig, name="forecast.png");
`})
	return err
}
