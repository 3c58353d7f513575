# Reads a CSV from a read-only mounted folder, sums it, and draws a chart
# that comes back to the MCP client as an image. Needs the datascience
# image and a policy that mounts examples/data at /data/sales (make demo
# writes one).
import matplotlib.pyplot as plt
import pandas as pd

from mcp_tools import show

df = pd.read_csv("/data/sales/sales.csv")
print(df.groupby("region")["revenue"].sum().to_string())

fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
for region, rows in df.groupby("region"):
    ax.plot(rows["month"].str[5:], rows["revenue"], marker="o", label=region)
ax.set_title("Revenue by month, 2026")
ax.set_xlabel("month")
ax.legend()
# The last line's value is shown, as in Jupyter: ";" keeps show()'s (the
# file's path) out of the output.
show(fig, name="revenue.png");
