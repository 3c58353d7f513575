// Command agent is what an agent builder writes to drive bridge's
// run_python over MCP: it starts `bridge serve` as a stdio MCP server, lists
// its tool, and makes the calls of a data analyst's session (analyst.go):
// a CSV passed in, a chart, a snapshot before a risky step, a fork of it for
// a what-if, and a large result chained into the next run by its URI. It
// prints each call's arguments and what came back.
//
//	go run ./examples/agent -- bridge serve --policy examples/policies/datascience.yaml
//
// Everything after "--" is the server's command line. It uses the MCP Go
// SDK only, as any MCP client would; examples/README.md says more.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	csv := flag.String("csv", "examples/data/sales.csv", "the CSV `file` the analyst passes in")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "Usage: agent [-csv FILE] -- BRIDGE serve --policy POLICY\n\nRuns a data analyst's session through bridge's run_python (examples/README.md).")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*csv, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run(csvPath string, server []string) error {
	data, err := os.ReadFile(csvPath)
	if err != nil {
		return fmt.Errorf("the CSV to pass in: %w (run from the repository's root, or give -csv FILE)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// bridge serve speaks MCP on its stdin and stdout; its log goes to our
	// stderr.
	cmd := exec.Command(server[0], server[1:]...)
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "analyst-agent", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("starting %s: %w", strings.Join(server, " "), err)
	}
	defer cs.Close()

	if err := listTool(ctx, cs); err != nil {
		return err
	}
	return analyst(ctx, &agent{cs: cs}, string(data))
}

// listTool prints run_python's arguments, and checks that the server's
// policy turned on what the analyst uses.
func listTool(ctx context.Context, cs *mcp.ClientSession) error {
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		return err
	}
	for _, t := range tools.Tools {
		var schema struct {
			Properties map[string]any `json:"properties"`
		}
		b, _ := json.Marshal(t.InputSchema)
		if err := json.Unmarshal(b, &schema); err != nil {
			return fmt.Errorf("%s's input schema: %w", t.Name, err)
		}
		var args []string
		for name := range schema.Properties {
			args = append(args, name)
		}
		slices.Sort(args)
		fmt.Printf("tool %s(%s)\n", t.Name, strings.Join(args, ", "))
		for _, need := range []string{"inputs", "session", "snapshot", "restore"} {
			if t.Name == "run_python" && !slices.Contains(args, need) {
				return fmt.Errorf("run_python takes no %q: serve with a policy that turns on sessions and snapshots, such as examples/policies/datascience.yaml", need)
			}
		}
	}
	return nil
}

// agent makes run_python calls and prints them and their results.
type agent struct {
	cs    *mcp.ClientSession
	calls int
}

// result is what one call gave back, as the agent uses it.
type result struct {
	Status   string `json:"status"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Message  string `json:"message"`
	Snapshot *struct {
		Label string `json:"label"`
		Saved bool   `json:"saved"`
		Bytes int64  `json:"bytes"`
		Note  string `json:"note"`
	} `json:"snapshot"`
	Restored *struct {
		Label string `json:"label"`
		Note  string `json:"note"`
	} `json:"restored"`
	// links are the files that came back by reference: name to URI.
	links map[string]string
}

// call runs run_python with args, prints what it sent and what came back,
// and fails unless the code ran to its end.
func (a *agent) call(ctx context.Context, what string, args map[string]any) (*result, error) {
	a.calls++
	fmt.Printf("\n[%d] %s\n    -> %s\n", a.calls, what, shortArgs(args))
	start := time.Now()
	res, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: args})
	if err != nil {
		return nil, err
	}
	r := &result{links: map[string]string{}}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("structuredContent: %w", err)
	}
	fmt.Printf("    <- %s in %.1f s\n", r.Status, time.Since(start).Seconds())
	for _, line := range strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n") {
		fmt.Printf("    | %s\n", line)
	}
	printContent(res.Content, r)
	if r.Snapshot != nil {
		if r.Snapshot.Saved {
			fmt.Printf("    snapshot %q saved (%d bytes)\n", r.Snapshot.Label, r.Snapshot.Bytes)
		} else {
			fmt.Printf("    snapshot %q not saved: %s\n", r.Snapshot.Label, r.Snapshot.Note)
		}
	}
	if r.Restored != nil {
		fmt.Printf("    restored %q: %s\n", r.Restored.Label, r.Restored.Note)
	}
	if r.Status != "ok" {
		return r, fmt.Errorf("call %d (%s): status %s: %s%s", a.calls, what, r.Status, r.Message, r.Stderr)
	}
	return r, nil
}

// printContent prints the images and links among a result's content, and
// keeps the links' URIs in r.
func printContent(content []mcp.Content, r *result) {
	for _, c := range content {
		switch c := c.(type) {
		case *mcp.ImageContent:
			size := "?"
			if cfg, err := png.DecodeConfig(bytes.NewReader(c.Data)); err == nil {
				size = fmt.Sprintf("%dx%d", cfg.Width, cfg.Height)
			}
			fmt.Printf("    image %s %s, %d bytes\n", c.MIMEType, size, len(c.Data))
		case *mcp.ResourceLink:
			size := "size unknown"
			if c.Size != nil {
				size = fmt.Sprintf("%d bytes", *c.Size)
			}
			fmt.Printf("    file %s by reference: %s (%s)\n", c.Name, c.URI, size)
			r.links[c.Name] = c.URI
		}
	}
}

// shortArgs is args as JSON, with the code and the inputs' text cut to
// their size.
func shortArgs(args map[string]any) string {
	short := map[string]any{}
	for k, v := range args {
		short[k] = v
	}
	if code, ok := args["code"].(string); ok {
		short["code"] = fmt.Sprintf("<%d lines of Python>", strings.Count(strings.TrimSpace(code), "\n")+1)
	}
	if inputs, ok := args["inputs"].([]map[string]any); ok {
		var cut []map[string]any
		for _, in := range inputs {
			c := map[string]any{}
			for k, v := range in {
				c[k] = v
			}
			if text, ok := in["text"].(string); ok {
				c["text"] = fmt.Sprintf("<%d bytes>", len(text))
			}
			cut = append(cut, c)
		}
		short["inputs"] = cut
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // "<", not "\u003c"
	_ = enc.Encode(short)
	return strings.TrimSpace(b.String())
}
