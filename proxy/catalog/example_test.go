package catalog_test

import (
	"encoding/json"
	"fmt"

	"github.com/bridge-mcp/bridge/proxy/catalog"
)

// The code finds a tool by saying what it wants to do: the search ranks
// every tool of every server by its name, title, description and
// parameters.
func ExampleCatalog_Search() {
	c := catalog.New([]catalog.Tool{
		{Server: "github", Name: "create_issue", Description: "Create a new issue in a repository.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"repo":{"type":"string"},"title":{"type":"string"}}}`)},
		{Server: "github", Name: "list_pulls", Description: "List the pull requests of a repository."},
		{Server: "mail", Name: "send_email", Description: "Send an email to a recipient.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"},"body":{"type":"string"}}}`)},
	})
	for _, hit := range c.Search("open an issue", 2) {
		fmt.Println(hit.Tool.Server, hit.Tool.Name, hit.Params)
	}
	// Output:
	// github create_issue [repo title]
}

// What a tool returns, shown to the code from its output schema.
func ExampleResultShape() {
	fmt.Println(catalog.ResultShape(json.RawMessage(`{"type":"object","properties":{
		"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"email":{"type":"string"}},"required":["id","email"]}},
		"total":{"type":"integer"}},"required":["items","total"]}`)))
	// Output:
	// {items: [{id: int, email: str}], total: int}
}

// Each server becomes a Python module of mcp_tools; a name that is not an
// identifier, or that the package itself uses, is made into one.
func ExampleModuleAliases() {
	aliases := catalog.ModuleAliases([]string{"github", "server-everything", "search", "2fa"}, map[string]bool{"search": true})
	for _, s := range []string{"github", "server-everything", "search", "2fa"} {
		fmt.Printf("%s -> mcp_tools.%s\n", s, aliases[s])
	}
	// Output:
	// github -> mcp_tools.github
	// server-everything -> mcp_tools.server_everything
	// search -> mcp_tools.search_
	// 2fa -> mcp_tools._2fa
}
