package catalog

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// referenceTools are the tools of the reference MCP servers
// @modelcontextprotocol/server-filesystem, -memory and -everything (npm
// version 2026.8.31), as their tools/list answers, outputSchema left out.
var referenceTools = map[string]string{
	"filesystem": `[
{"name":"read_file","title":"Read File (Deprecated)","description":"Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"},"tail":{"description":"If provided, returns only the last N lines of the file","type":"number"},"head":{"description":"If provided, returns only the first N lines of the file","type":"number"}},"required":["path"]},"annotations":{"readOnlyHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"read_text_file","title":"Read Text File","description":"Read the complete contents of a file from the file system as text. Handles various text encodings and provides detailed error messages if the file cannot be read. Use this tool when you need to examine the contents of a single file. Use the 'head' parameter to read only the first N lines of a file, or the 'tail' parameter to read only the last N lines of a file. Operates on the file as text regardless of extension. Only works within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"},"tail":{"description":"If provided, returns only the last N lines of the file","type":"number"},"head":{"description":"If provided, returns only the first N lines of the file","type":"number"}},"required":["path"]},"annotations":{"readOnlyHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"read_media_file","title":"Read Media File","description":"Read a file and return it as a base64-encoded content block with its MIME type. Image and audio files are returned as image/audio content; any other file type is returned as an embedded resource. Only works within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"}},"required":["path"]},"annotations":{"readOnlyHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"read_multiple_files","title":"Read Multiple Files","description":"Read the contents of multiple files simultaneously. This is more efficient than reading files one by one when you need to analyze or compare multiple files. Each file's content is returned with its path as a reference. Failed reads for individual files won't stop the entire operation. Only works within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"paths":{"minItems":1,"type":"array","items":{"type":"string"},"description":"Array of file paths to read. Each path must be a string pointing to a valid file within allowed directories."}},"required":["paths"]},"annotations":{"readOnlyHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"write_file","title":"Write File","description":"Create a new file or completely overwrite an existing file with new content. Use with caution as it will overwrite existing files without warning. Handles text content with proper encoding. Only works within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]},"annotations":{"readOnlyHint":false,"idempotentHint":true,"destructiveHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"edit_file","title":"Edit File","description":"Make line-based edits to a text file. Each edit replaces exact line sequences with new content. Returns a git-style diff showing the changes made. Only works within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"},"edits":{"type":"array","items":{"type":"object","properties":{"oldText":{"type":"string","description":"Text to search for - must match exactly"},"newText":{"type":"string","description":"Text to replace with"}},"required":["oldText","newText"]}},"dryRun":{"default":false,"description":"Preview changes using git-style diff format","type":"boolean"}},"required":["path","edits"]},"annotations":{"readOnlyHint":false,"idempotentHint":false,"destructiveHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"create_directory","title":"Create Directory","description":"Create a new directory or ensure a directory exists. Can create multiple nested directories in one operation. If the directory already exists, this operation will succeed silently. Perfect for setting up directory structures for projects or ensuring required paths exist. Only works within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"}},"required":["path"]},"annotations":{"readOnlyHint":false,"idempotentHint":true,"destructiveHint":false,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"list_directory","title":"List Directory","description":"Get a detailed listing of all files and directories in a specified path. Results clearly distinguish between files and directories with [FILE] and [DIR] prefixes. This tool is essential for understanding directory structure and finding specific files within a directory. Only works within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"}},"required":["path"]},"annotations":{"readOnlyHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"list_directory_with_sizes","title":"List Directory with Sizes","description":"Get a detailed listing of all files and directories in a specified path, including sizes. Results clearly distinguish between files and directories with [FILE] and [DIR] prefixes. This tool is useful for understanding directory structure and finding specific files within a directory. Only works within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"},"sortBy":{"default":"name","description":"Sort entries by name or size","type":"string","enum":["name","size"]}},"required":["path"]},"annotations":{"readOnlyHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"directory_tree","title":"Directory Tree","description":"Get a recursive tree view of files and directories as a JSON structure. Each entry includes 'name', 'type' (file/directory), and 'children' for directories. Files have no children array, while directories always have a children array (which may be empty). The output is formatted with 2-space indentation for readability. Only works within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"},"excludePatterns":{"default":[],"type":"array","items":{"type":"string"}}},"required":["path"]},"annotations":{"readOnlyHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"move_file","title":"Move File","description":"Move or rename files and directories. Can move files between directories and rename them in a single operation. If the destination exists, the operation will fail. Works across different directories and can be used for simple renaming within the same directory. Both source and destination must be within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"source":{"type":"string"},"destination":{"type":"string"}},"required":["source","destination"]},"annotations":{"readOnlyHint":false,"idempotentHint":false,"destructiveHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"search_files","title":"Search Files","description":"Recursively search for files and directories matching a pattern. The patterns should be glob-style patterns that match paths relative to the working directory. Use pattern like '*.ext' to match files in current directory, and '**/*.ext' to match files in all subdirectories. Returns full paths to all matching items. Great for finding files when you don't know their exact location. Only searches within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"},"pattern":{"type":"string"},"excludePatterns":{"default":[],"type":"array","items":{"type":"string"}}},"required":["path","pattern"]},"annotations":{"readOnlyHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"get_file_info","title":"Get File Info","description":"Retrieve detailed metadata about a file or directory. Returns comprehensive information including size, creation time, last modified time, permissions, and type. This tool is perfect for understanding file characteristics without reading the actual content. Only works within allowed directories.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"}},"required":["path"]},"annotations":{"readOnlyHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"list_allowed_directories","title":"List Allowed Directories","description":"Returns the list of directories that this server is allowed to access. Subdirectories within these allowed directories are also accessible. Use this to understand which directories and their nested paths are available before trying to access files.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{}},"annotations":{"readOnlyHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}}
]`,
	"memory": `[
{"name":"create_entities","title":"Create Entities","description":"Create multiple new entities in the knowledge graph","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"entities":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string","description":"The name of the entity"},"entityType":{"type":"string","description":"The type of the entity"},"observations":{"type":"array","items":{"type":"string"},"description":"An array of observation contents associated with the entity"}},"required":["name","entityType","observations"]}}},"required":["entities"]},"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":false,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"create_relations","title":"Create Relations","description":"Create multiple new relations between entities in the knowledge graph. Relations should be in active voice","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"relations":{"type":"array","items":{"type":"object","properties":{"from":{"type":"string","description":"The name of the entity where the relation starts"},"to":{"type":"string","description":"The name of the entity where the relation ends"},"relationType":{"type":"string","description":"The type of the relation"}},"required":["from","to","relationType"]}}},"required":["relations"]},"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":false,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"add_observations","title":"Add Observations","description":"Add new observations to existing entities in the knowledge graph","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"observations":{"type":"array","items":{"type":"object","properties":{"entityName":{"type":"string","description":"The name of the entity to add the observations to"},"contents":{"type":"array","items":{"type":"string"},"description":"An array of observation contents to add"}},"required":["entityName","contents"]}}},"required":["observations"]},"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":false,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"delete_entities","title":"Delete Entities","description":"Delete multiple entities and their associated relations from the knowledge graph","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"entityNames":{"type":"array","items":{"type":"string"},"description":"An array of entity names to delete"}},"required":["entityNames"]},"annotations":{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"delete_observations","title":"Delete Observations","description":"Delete specific observations from entities in the knowledge graph","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"deletions":{"type":"array","items":{"type":"object","properties":{"entityName":{"type":"string","description":"The name of the entity containing the observations"},"observations":{"type":"array","items":{"type":"string"},"description":"An array of observations to delete"}},"required":["entityName","observations"]}}},"required":["deletions"]},"annotations":{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"delete_relations","title":"Delete Relations","description":"Delete multiple relations from the knowledge graph","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"relations":{"type":"array","items":{"type":"object","properties":{"from":{"type":"string","description":"The name of the entity where the relation starts"},"to":{"type":"string","description":"The name of the entity where the relation ends"},"relationType":{"type":"string","description":"The type of the relation"}},"required":["from","to","relationType"]},"description":"An array of relations to delete"}},"required":["relations"]},"annotations":{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"read_graph","title":"Read Graph","description":"Read the entire knowledge graph","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{}},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"search_nodes","title":"Search Nodes","description":"Search for nodes in the knowledge graph based on a query","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"query":{"type":"string","description":"The search query to match against entity names, types, and observation content"}},"required":["query"]},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"open_nodes","title":"Open Nodes","description":"Open specific nodes in the knowledge graph by their names","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"names":{"type":"array","items":{"type":"string"},"description":"An array of entity names to retrieve"}},"required":["names"]},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}}
]`,
	"everything": `[
{"name":"echo","title":"Echo Tool","description":"Echoes back the input string","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"message":{"type":"string","description":"Message to echo"}},"required":["message"]},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"get-annotated-message","title":"Get Annotated Message Tool","description":"Demonstrates how annotations can be used to provide metadata about content.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"messageType":{"type":"string","enum":["error","success","debug"],"description":"Type of message to demonstrate different annotation patterns"},"includeImage":{"default":false,"description":"Whether to include an example image","type":"boolean"}},"required":["messageType"]},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"get-env","title":"Print Environment Tool","description":"Returns all environment variables, helpful for debugging MCP server configuration","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{}},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"get-resource-links","title":"Get Resource Links Tool","description":"Returns up to ten resource links that reference different types of resources","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"count":{"default":3,"description":"Number of resource links to return (1-10)","type":"number","minimum":1,"maximum":10}}},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"get-resource-reference","title":"Get Resource Reference Tool","description":"Returns a resource reference that can be used by MCP clients","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"resourceType":{"default":"Text","type":"string","enum":["Text","Blob"]},"resourceId":{"default":1,"description":"ID of the text resource to fetch","type":"number"}}},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"get-structured-content","title":"Get Structured Content Tool","description":"Returns structured content along with an output schema for client data validation","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"location":{"type":"string","enum":["New York","Chicago","Los Angeles"],"description":"Choose city"}},"required":["location"]},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"get-sum","title":"Get Sum Tool","description":"Returns the sum of two numbers","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"type":"number","description":"First number"},"b":{"type":"number","description":"Second number"}},"required":["a","b"]},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"get-tiny-image","title":"Get Tiny Image Tool","description":"Returns a tiny MCP logo image.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{}},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"gzip-file-as-resource","title":"GZip File as Resource Tool","description":"Compresses a single file using gzip compression. Depending upon the selected output type, returns either the compressed data as a gzipped resource or a resource link, allowing it to be downloaded in a subsequent request during the current session.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"name":{"default":"README.md.gz","type":"string","description":"Name of the output file"},"data":{"default":"https://raw.githubusercontent.com/modelcontextprotocol/servers/refs/heads/main/README.md","type":"string","format":"uri","description":"URL or data URI of the file content to compress"},"outputType":{"default":"resourceLink","description":"How the resulting gzipped file should be returned. 'resourceLink' returns a link to a resource that can be read later, 'resource' returns a full resource object.","type":"string","enum":["resourceLink","resource"]}}},"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":true,"openWorldHint":true},"execution":{"taskSupport":"forbidden"}},
{"name":"toggle-simulated-logging","title":"Toggle Simulated Logging","description":"Toggles simulated, random-leveled logging on or off.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{}},"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":false,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"toggle-subscriber-updates","title":"Toggle Subscriber Updates","description":"Toggles simulated resource subscription updates on or off.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{}},"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":false,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"trigger-long-running-operation","title":"Trigger Long Running Operation Tool","description":"Demonstrates a long running operation with progress updates.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"duration":{"default":10,"description":"Duration of the operation in seconds","type":"number"},"steps":{"default":5,"description":"Number of steps in the operation","type":"number"}}},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false},"execution":{"taskSupport":"forbidden"}},
{"name":"simulate-research-query","title":"Simulate Research Query","description":"Simulates a deep research operation that gathers, analyzes, and synthesizes information. Demonstrates MCP task-based operations with progress through multiple stages. If 'ambiguous' is true and client supports elicitation, sends an elicitation request for clarification.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"topic":{"type":"string","description":"The research topic to investigate"},"ambiguous":{"default":false,"description":"Simulate an ambiguous query that requires clarification (triggers input_required status)","type":"boolean"}},"required":["topic"]},"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":false,"openWorldHint":false},"execution":{"taskSupport":"required"}}
]`,
}

// referenceServers are the keys of referenceTools, in catalog order.
var referenceServers = []string{"filesystem", "memory", "everything"}

// referenceCatalog returns the catalog of referenceTools.
func referenceCatalog(t testing.TB) *Catalog {
	t.Helper()
	var tools []Tool
	for _, server := range referenceServers {
		var list []struct {
			Name         string          `json:"name"`
			Title        string          `json:"title"`
			Description  string          `json:"description"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
			Annotations  json.RawMessage `json:"annotations"`
		}
		if err := json.Unmarshal([]byte(referenceTools[server]), &list); err != nil {
			t.Fatalf("%s: %v", server, err)
		}
		for _, l := range list {
			tools = append(tools, Tool{Server: server, Name: l.Name, Title: l.Title, Description: l.Description,
				InputSchema: l.InputSchema, OutputSchema: l.OutputSchema, Annotations: l.Annotations})
		}
	}
	return New(tools)
}

func TestStem(t *testing.T) {
	tests := []struct{ in, want string }{
		{"file", "fil"},
		{"files", "fil"},
		{"write", "writ"},
		{"writes", "writ"},
		{"writing", "writ"},
		{"entity", "entity"},
		{"entities", "entity"},
		{"directories", "directory"},
		{"create", "creat"},
		{"created", "creat"},
		{"creating", "creat"},
		{"matches", "match"},
		{"boxes", "box"},
		{"processes", "process"},
		{"process", "process"},
		{"class", "class"},
		{"status", "status"},
		{"analysis", "analysis"},
		{"running", "run"},
		{"stopped", "stop"},
		{"called", "call"},
		{"added", "add"},
		{"add", "add"},
		{"settings", "set"},
		{"string", "string"},
		{"need", "need"},
		{"lists", "list"},
		{"listing", "list"},
		{"use", "use"},
		{"uses", "use"},
		{"gets", "get"},
		{"base64", "base64"},
		{"cafés", "cafés"},
	}
	for _, tt := range tests {
		if got := stem(tt.in); got != tt.want {
			t.Errorf("stem(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAppendTokens(t *testing.T) {
	tests := []struct {
		in   string
		want string // space-separated words, stemmed by the test
	}{
		{"", ""},
		{"read_multiple_files", "read multiple files"},
		{"get-tiny-image", "get tiny image"},
		{"fs.readFile/v2", "fs read file v2"},
		{"dryRun", "dry run"},
		{"HTTPServer", "http server"},
		{"parseHTTP", "parse http"},
		{"base64Encode", "base64 encode"},
		{"ID", "id"},
		{"Read the complete contents of a file, as text!", "read complete contents file text"},
		{"the of and to a", ""},
		{"Größe ändern", "größe ändern"},
		{"日本語のファイル", "日本語のファイル"},
		{"tab\tnew\nline", "tab new line"},
	}
	for _, tt := range tests {
		var want []string
		for _, w := range strings.Fields(tt.want) {
			want = append(want, stem(w))
		}
		if got := appendTokens(nil, tt.in); !slices.Equal(got, want) {
			t.Errorf("appendTokens(%q) = %q, want %q", tt.in, got, want)
		}
	}
}

// hitNames returns "server.tool" for each hit.
func hitNames(hits []SearchHit) []string {
	var names []string
	for _, h := range hits {
		names = append(names, h.Tool.Server+"."+h.Tool.Name)
	}
	return names
}

func TestSearchReference(t *testing.T) {
	c := referenceCatalog(t)
	if c.Len() != 36 {
		t.Fatalf("Len() = %d, want 36", c.Len())
	}
	tests := []struct {
		query string
		want  []string // the first hits, in order
	}{
		{"write file", []string{"filesystem.write_file"}},
		{"writing files", []string{"filesystem.write_file"}},
		{"Write File", []string{"filesystem.write_file"}},
		{"echo", []string{"everything.echo"}},
		{"create entities", []string{"memory.create_entities", "memory.create_relations"}},
		{"read multiple files", []string{"filesystem.read_multiple_files"}},
		{"list directory", []string{"filesystem.list_directory"}},
		{"directory tree", []string{"filesystem.directory_tree"}},
		{"environment variables", []string{"everything.get-env"}},
		{"add two numbers", []string{"everything.get-sum"}},
		{"compress", []string{"everything.gzip-file-as-resource"}},
		{"rename a file", []string{"filesystem.move_file"}},
		{"find files matching a pattern", []string{"filesystem.search_files"}},
		{"file size", []string{"filesystem.list_directory_with_sizes"}},
		{"file metadata permissions", []string{"filesystem.get_file_info"}},
		{"knowledge graph", []string{"memory.read_graph"}},
		{"observations", []string{"memory.add_observations", "memory.delete_observations"}},
		{"long running operation with progress", []string{"everything.trigger-long-running-operation"}},
		{"logging", []string{"everything.toggle-simulated-logging"}},
		{"tiny image", []string{"everything.get-tiny-image"}},
		// Parameter names and descriptions count too.
		{"excludePatterns", []string{"filesystem.search_files", "filesystem.directory_tree"}},
		{"preview changes as a diff", []string{"filesystem.edit_file"}},
		{"entityNames", []string{"memory.delete_entities"}},
		// Prefix expansion.
		{"dir", []string{"filesystem.list_directory", "filesystem.list_directory_with_sizes"}},
		// Exact names come first, even when other tools score higher on
		// their terms.
		{"read_file", []string{"filesystem.read_file"}},
		{"  READ_TEXT_FILE ", []string{"filesystem.read_text_file"}},
		{"filesystem.read_file", []string{"filesystem.read_file"}},
		{"everything.get-sum", []string{"everything.get-sum"}},
		// A server name alone matches all its tools equally: by name.
		{"memory", []string{"memory.add_observations", "memory.create_entities", "memory.create_relations"}},
	}
	for _, tt := range tests {
		hits := c.Search(tt.query, 0)
		got := hitNames(hits)
		if len(got) < len(tt.want) || !slices.Equal(got[:len(tt.want)], tt.want) {
			t.Errorf("Search(%q) = %q, want it to start with %q", tt.query, got, tt.want)
		}
		for i := 1; i < len(hits); i++ {
			if hits[i].Score > hits[i-1].Score {
				t.Errorf("Search(%q): scores not in order: %v", tt.query, hits)
			}
		}
	}
}

func TestSearchEdges(t *testing.T) {
	c := referenceCatalog(t)
	for _, q := range []string{"", "   ", "the of and", "!!!", "qwertyuiop", "xy"} {
		if hits := c.Search(q, 5); hits != nil {
			t.Errorf("Search(%q) = %q, want nil", q, hitNames(hits))
		}
	}
	// limit <= 0 means 5; limit is capped at 50; fewer when fewer match.
	for _, tt := range []struct{ limit, want int }{{0, 5}, {-3, 5}, {1, 1}, {7, 7}, {1000, 36}} {
		if got := len(c.Search("file directory entity graph echo get toggle simulate trigger", tt.limit)); got != tt.want {
			t.Errorf("Search(..., %d) returned %d hits, want %d", tt.limit, got, tt.want)
		}
	}
	var many []Tool
	for i := range 80 {
		many = append(many, Tool{Server: "s", Name: fmt.Sprintf("tool_%02d", i), Description: "Does things."})
	}
	if got := len(New(many).Search("things", 1000)); got != 50 {
		t.Errorf("Search(..., 1000) on 80 matching tools returned %d hits, want 50", got)
	}

	// Params: the schema's property order, not sorted.
	hits := c.Search("read_text_file", 1)
	if len(hits) != 1 || !slices.Equal(hits[0].Params, []string{"path", "tail", "head"}) {
		t.Errorf("Search(read_text_file) = %+v, want one hit with params path, tail, head", hits)
	}
	hits[0].Params[0] = "changed"
	if got := c.Search("read_text_file", 1)[0].Params[0]; got != "path" {
		t.Errorf("Params shared with the catalog: got %q after a change", got)
	}
	if hits := c.Search("get-env", 1); len(hits) != 1 || hits[0].Params != nil {
		t.Errorf("Search(get-env) = %+v, want one hit without params", hits)
	}
	if hits := c.Search("edit_file", 1); len(hits) != 1 || string(hits[0].Tool.Annotations) == "" || hits[0].Tool.Title != "Edit File" {
		t.Errorf("Search(edit_file) = %+v, want the whole tool", hits)
	}
}

func TestSearchTiesAndExact(t *testing.T) {
	same := func(server, name string) Tool {
		return Tool{Server: server, Name: name, Description: "Fetch a web page."}
	}
	c := New([]Tool{same("web2", "fetch"), same("web1", "fetch"), same("web1", "get"), same("a", "fetch")})
	if got, want := hitNames(c.Search("web page", 10)), []string{"a.fetch", "web1.fetch", "web1.get", "web2.fetch"}; !slices.Equal(got, want) {
		t.Errorf("ties: got %q, want %q", got, want)
	}
	// An exact name puts every tool of that name first.
	if got, want := hitNames(c.Search("fetch", 10)), []string{"a.fetch", "web1.fetch", "web2.fetch", "web1.get"}; !slices.Equal(got, want) {
		t.Errorf("exact name: got %q, want %q", got, want)
	}
	if got, want := hitNames(c.Search("web2.fetch", 10))[0], "web2.fetch"; got != want {
		t.Errorf("exact server.tool: got %q first, want %q", got, want)
	}

	// An exact name wins even when its terms score nothing.
	c = New([]Tool{
		{Server: "s", Name: "the", Description: "Returns the weather."},
		{Server: "s", Name: "weather", Description: "The weather, the forecast and the wind."},
	})
	if got, want := hitNames(c.Search("the", 5)), []string{"s.the"}; !slices.Equal(got, want) {
		t.Errorf("stop-word name: got %q, want %q", got, want)
	}

	// Empty catalogs.
	for _, c := range []*Catalog{New(nil), nil, {}} {
		if hits := c.Search("anything", 5); hits != nil {
			t.Errorf("empty catalog: got %q", hitNames(hits))
		}
		if _, ok := c.Lookup("s", "t"); ok || c.Len() != 0 || c.Tools("s") != nil {
			t.Errorf("empty catalog %#v has tools", c)
		}
	}
}

func TestCatalogAccessors(t *testing.T) {
	tools := []Tool{
		{Server: "b", Name: "z"},
		{Server: "a", Name: "y"},
		{Server: "b", Name: "x", Description: "first"},
		{Server: "b", Name: "x", Description: "second"},
		{Server: "a", Name: "w"},
	}
	c := New(tools)
	tools[0].Name = "changed" // the catalog has its own copy
	if c.Len() != 4 {
		t.Errorf("Len() = %d, want 4", c.Len())
	}
	names := func(ts []Tool) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Name)
		}
		return out
	}
	if got := names(c.Tools("b")); !slices.Equal(got, []string{"z", "x"}) {
		t.Errorf("Tools(b) = %q, want z, x", got)
	}
	if got := names(c.Tools("a")); !slices.Equal(got, []string{"y", "w"}) {
		t.Errorf("Tools(a) = %q, want y, w", got)
	}
	if got := c.Tools("c"); got != nil {
		t.Errorf("Tools(c) = %v, want nil", got)
	}
	c.Tools("b")[0].Name = "changed"
	if got := c.Tools("b")[0].Name; got != "z" {
		t.Errorf("Tools shares its slice: got %q", got)
	}
	if got, ok := c.Lookup("b", "x"); !ok || got.Description != "first" {
		t.Errorf("Lookup(b, x) = %+v, %v, want the first x", got, ok)
	}
	if _, ok := c.Lookup("a", "x"); ok {
		t.Error("Lookup(a, x) found a tool")
	}
}

func TestSchemaProperties(t *testing.T) {
	tests := []struct {
		schema     string
		names, des []string
	}{
		{``, nil, nil},
		{`null`, nil, nil},
		{`[1]`, nil, nil},
		{`{"type":"object"}`, nil, nil},
		{`{"properties":{}}`, nil, nil},
		{`{"type":"object","properties":{"zeta":{"type":"string","description":"Last letter"},"alpha":{"description":7},"mid":true,"zeta":{}},"required":["zeta"]}`,
			[]string{"zeta", "alpha", "mid"}, []string{"Last letter"}},
		{`{"$defs":{"properties":{"no":{}}},"properties":{"yes":{"description":"d"}},"properties":{"later":{}}}`,
			[]string{"yes"}, []string{"d"}},
		{`{"properties":{"a":{}},`, nil, nil},
		{`{"properties":{"a":{},"b"`, nil, nil},
		{`{"properties":[]}`, nil, nil},
	}
	for _, tt := range tests {
		names, descs := schemaProperties(json.RawMessage(tt.schema))
		if !slices.Equal(names, tt.names) || !slices.Equal(descs, tt.des) {
			t.Errorf("schemaProperties(%s) = %q, %q, want %q, %q", tt.schema, names, descs, tt.names, tt.des)
		}
	}
}

func TestSearchConcurrent(t *testing.T) {
	c := referenceCatalog(t)
	want := hitNames(c.Search("read files", 10))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got := hitNames(c.Search("read files", 10)); !slices.Equal(got, want) {
					t.Errorf("concurrent Search = %q, want %q", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestClosest(t *testing.T) {
	c := referenceCatalog(t)
	var fsTools, fsToolsButReadFile []string
	for _, tool := range c.Tools("filesystem") {
		fsTools = append(fsTools, tool.Name)
		if tool.Name != "read_file" {
			fsToolsButReadFile = append(fsToolsButReadFile, tool.Name)
		}
	}
	servers := []string{"filesystem", "memory", "everything", "github"}
	tests := []struct {
		name       string
		candidates []string
		n          int
		want       []string
	}{
		{"filesytem", servers, 3, []string{"filesystem"}},
		{"FileSystem", servers, 3, []string{"filesystem"}},
		{"files", servers, 3, []string{"filesystem"}},
		{"memroy", servers, 3, []string{"memory"}},
		{"git", servers, 3, []string{"github"}},
		{"read_file", fsToolsButReadFile, 3, []string{"read_text_file", "read_media_file", "read_multiple_files"}},
		{"read_file", fsTools, 2, []string{"read_file", "read_text_file"}},
		{"Read_File", fsTools, 1, []string{"read_file"}},
		{"list_dir", fsTools, 2, []string{"list_directory", "list_directory_with_sizes"}},
		{"write_files", fsTools, 1, []string{"write_file"}},
		{"delete_file", fsTools, 1, []string{"edit_file"}},
		{"tree", fsTools, 3, []string{"directory_tree"}},
		{"qwertyuiop", fsTools, 3, nil},
		{"zz", servers, 3, nil},
		{"filesytem", servers, 0, nil},
		{"", servers, 3, nil},
		{"memory", nil, 3, nil},
		// Repeated and empty candidates count once or not at all; equal
		// keys fall back to the name.
		{"ab", []string{"", "abd", "abc", "abc"}, 5, []string{"abc", "abd"}},
	}
	for _, tt := range tests {
		if got := Closest(tt.name, tt.candidates, tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("Closest(%q, %q, %d) = %q, want %q", tt.name, tt.candidates, tt.n, got, tt.want)
		}
	}
}

func TestModuleAlias(t *testing.T) {
	reserved := map[string]bool{"call": true, "search": true, "search_": true}
	tests := []struct{ in, want string }{
		{"filesystem", "filesystem"},
		{"server-everything", "server_everything"},
		{"get-tiny-image", "get_tiny_image"},
		{"my.server/v2", "my_server_v2"},
		{"CamelCase", "CamelCase"},
		{"2fa", "_2fa"},
		{"", "_"},
		{"_", "_"},
		{"-", "_"},
		{"café", "caf_"},
		{"日本", "__"},
		{"class", "class_"},
		{"from", "from_"},
		{"None", "None_"},
		{"none", "none"},
		{"async", "async_"},
		{"match", "match_"},
		{"type", "type_"},
		{"class_", "class_"},
		{"call", "call_"},
		{"search", "search__"},
		{"Call", "Call"},
	}
	for _, tt := range tests {
		if got := ModuleAlias(tt.in, reserved); got != tt.want {
			t.Errorf("ModuleAlias(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := ModuleAlias("call", nil); got != "call" {
		t.Errorf("ModuleAlias(call, nil) = %q, want call", got)
	}
}

func TestSummary(t *testing.T) {
	long := strings.Repeat("word ", 30) // 150 runes
	tests := []struct{ in, want string }{
		{"", ""},
		{"   ", ""},
		{"Echoes back the input string", "Echoes back the input string"},
		{"Returns a tiny MCP logo image.", "Returns a tiny MCP logo image."},
		{"Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.",
			"Read the complete contents of a file as text."},
		{"Is it? Yes.", "Is it?"},
		{"Stop! Now.", "Stop!"},
		{"First line\nSecond line.", "First line"},
		{"\n\n  First line.\r\nSecond", "First line."},
		{"Uses e.g. a file, i.e. this one. Then more.", "Uses e.g. a file, i.e. this one."},
		{"Version 1.2 is out. Really.", "Version 1.2 is out."},
		{"Ends with a period.", "Ends with a period."},
		{"Spaces\tand   tabs. More.", "Spaces and tabs."},
		{"日本語の説明。次の文。", "日本語の説明。"},
		{long, strings.TrimSpace(strings.Repeat("word ", 20)) + "…"},
		{"a" + long, "aword " + strings.TrimSpace(strings.Repeat("word ", 18)) + "…"},
		{strings.Repeat("x", 150), strings.Repeat("x", 99) + "…"},
		{strings.Repeat("é", 150), strings.Repeat("é", 99) + "…"},
		{strings.Repeat("ab, ", 40), strings.TrimSuffix(strings.Repeat("ab, ", 25), ", ") + "…"},
	}
	for _, tt := range tests {
		got := Summary(tt.in)
		if got != tt.want {
			t.Errorf("Summary(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if n := utf8.RuneCountInString(got); n > 100 {
			t.Errorf("Summary(%q) has %d runes", tt.in, n)
		}
	}
	c := referenceCatalog(t)
	for _, server := range referenceServers {
		for _, tool := range c.Tools(server) {
			s := Summary(tool.Description)
			if s == "" || utf8.RuneCountInString(s) > 100 || !strings.HasPrefix(tool.Description, strings.TrimSuffix(s, "…")) {
				t.Errorf("Summary of %s.%s = %q", server, tool.Name, s)
			}
		}
	}
}

// syntheticCatalog returns n tools on n/50 servers, with names,
// descriptions and schemas made of a few hundred words.
func syntheticCatalog(n int) []Tool {
	rng := rand.New(rand.NewPCG(1, 2))
	verbs := strings.Fields("get list create update delete search read write move copy sync send fetch run start stop query export import merge")
	nouns := strings.Fields("file directory issue pull_request comment user repository branch commit page database table row message channel event calendar invoice customer order ticket")
	vocab := strings.Fields("returns the a of for with by in to from given specified matching all new existing optional required list items record records entries field fields value values name names identifier id path url query filter limit offset page token content text json status error result results data metadata owner project workspace account team label labels date time range sort order ascending descending")
	words := func(k int) string {
		ws := make([]string, k)
		for i := range ws {
			ws[i] = vocab[rng.IntN(len(vocab))]
		}
		return strings.Join(ws, " ")
	}
	tools := make([]Tool, n)
	for i := range tools {
		verb, noun := verbs[rng.IntN(len(verbs))], nouns[rng.IntN(len(nouns))]
		var props []string
		for p := range 1 + rng.IntN(4) {
			props = append(props, fmt.Sprintf("%q:{\"type\":\"string\",\"description\":%q}", fmt.Sprintf("%s%d", vocab[rng.IntN(len(vocab))], p), words(8)))
		}
		tools[i] = Tool{
			Server:      fmt.Sprintf("server-%02d", i/50),
			Name:        fmt.Sprintf("%s_%s_%d", verb, noun, i),
			Title:       verb + " " + noun,
			Description: strings.ToUpper(verb[:1]) + verb[1:] + " a " + noun + " " + words(25) + ".",
			InputSchema: json.RawMessage(`{"type":"object","properties":{` + strings.Join(props, ",") + `}}`),
		}
	}
	return tools
}

func TestSyntheticCatalog(t *testing.T) {
	tools := syntheticCatalog(1000)
	c := New(tools)
	if c.Len() != 1000 {
		t.Fatalf("Len() = %d", c.Len())
	}
	name := tools[500].Server + "." + tools[500].Name
	if got := hitNames(c.Search(name, 5)); len(got) == 0 || got[0] != name {
		t.Errorf("Search(%q) = %q", name, got)
	}
	if got := c.Search("create issue comment", 50); len(got) != 50 {
		t.Errorf("Search returned %d hits, want 50", len(got))
	}
}

var benchQueries = []string{"create issue", "list files in a directory", "search pull requests by owner", "delete", "send message to channel", "get_user_7", "calendar events in a date range"}

func BenchmarkSearch(b *testing.B) {
	c := New(syntheticCatalog(1000))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Search(benchQueries[i%len(benchQueries)], 10)
		i++
	}
}

func BenchmarkNewCatalog(b *testing.B) {
	tools := syntheticCatalog(1000)
	b.ReportAllocs()
	for b.Loop() {
		New(tools)
	}
}

func BenchmarkClosest(b *testing.B) {
	var names []string
	for _, t := range syntheticCatalog(1000)[:200] {
		names = append(names, t.Name)
	}
	b.ReportAllocs()
	for b.Loop() {
		Closest("creat_isue_17", names, 3)
	}
}

func TestModuleAliasesKeepOwnNames(t *testing.T) {
	reserved := map[string]bool{"search": true, "__all__": true}
	got := ModuleAliases([]string{"a-b", "a_b", "search", "__class__", "__all-", "__all_"}, reserved)
	want := map[string]string{"a-b": "a_b_", "a_b": "a_b", "search": "search_", "__class__": "_class__", "__all-": "__all___", "__all_": "__all_"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q -> %q, want %q", k, got[k], v)
		}
	}
}
