"""Test client for molecule/anaconda's verify: asks a Jupyter server what a browser would, and prints JSON.

    PYTHON jupyter_api_check.py PORT (--token-file F | --password P) [--code CODE]...

Run inside the test host with the Python of the server's virtual environment (tornado comes with Jupyter). It reads
/api/status without credentials, logs in (a token in the Authorization header, or a password through the /login form
with its _xsrf cookie), reads /api/status and /api/kernelspecs, then for each kernelspec offered starts a kernel through
the REST API, runs each CODE in it over the kernel's websocket, and prints the execute_result of each.
"""

import argparse
import asyncio
import http.cookiejar
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid

from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect


class Client:
    def __init__(self, port):
        self.base = "http://127.0.0.1:%d" % port
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar),
                                                  NoRedirect())
        self.headers = {}

    def request(self, method, path, body=None, form=None):
        data, headers = None, dict(self.headers)
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        xsrf = self.cookie("_xsrf")
        if xsrf and method != "GET":
            headers["X-XSRFToken"] = xsrf
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.read().decode(), dict(response.headers)
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(), dict(error.headers)

    def cookie(self, name):
        return next((cookie.value for cookie in self.jar if cookie.name == name), None)

    def login(self, token=None, password=None):
        if token:
            self.headers["Authorization"] = "token " + token
            return None
        self.request("GET", "/login")
        form = {"password": password, "_xsrf": self.cookie("_xsrf") or ""}
        status, _body, headers = self.request("POST", "/login?next=%2Flab", form=form)
        return {"status": status, "location": headers.get("Location", "")}

    async def run(self, kernel_id, codes):
        url = self.base.replace("http", "ws", 1) + "/api/kernels/%s/channels" % kernel_id
        headers = dict(self.headers)
        cookies = "; ".join("%s=%s" % (cookie.name, cookie.value) for cookie in self.jar)
        if cookies:
            headers["Cookie"] = cookies
        connection = await websocket_connect(HTTPRequest(url, headers=headers))
        session, results = uuid.uuid4().hex, []
        for code in codes:
            msg_id = uuid.uuid4().hex
            connection.write_message(json.dumps({
                "header": {"msg_id": msg_id, "username": "verify", "session": session, "msg_type": "execute_request",
                           "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True}}))
            result, reply = None, None
            while reply is None or result is None:
                message = json.loads(await asyncio.wait_for(connection.read_message(), 60))
                if message.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                if message["msg_type"] == "execute_result":
                    result = message["content"]["data"]["text/plain"]
                elif message["msg_type"] == "error":
                    result = "error: %s: %s" % (message["content"]["ename"], message["content"]["evalue"])
                elif message["msg_type"] == "execute_reply":
                    reply = message["content"]["status"]
                    if reply != "ok" and result is None:
                        result = "reply: " + reply
            results.append(result)
        connection.close()
        return results


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--token-file")
    parser.add_argument("--password")
    parser.add_argument("--code", action="append", default=[])
    args = parser.parse_args()
    client = Client(args.port)
    report = {"anonymous_status": client.request("GET", "/api/status")[0]}
    token = None
    if args.token_file:
        with open(args.token_file) as handle:
            token = handle.read()
        wrong = Client(args.port)
        wrong.login(token="wrong-" + token)
        report["wrong_token_status"] = wrong.request("GET", "/api/status")[0]
    report["login"] = client.login(token=token, password=args.password)
    report["status"] = client.request("GET", "/api/status")[0]
    status, body, _headers = client.request("GET", "/api/kernelspecs")
    specs = json.loads(body)["kernelspecs"] if status == 200 else {}
    report["kernelspecs"] = {name: spec["spec"]["argv"][0] for name, spec in sorted(specs.items())}
    report["results"] = {}
    for name in sorted(name for name in specs if name.startswith("conda-env-")):
        status, body, _headers = client.request("POST", "/api/kernels", body={"name": name})
        if status != 201:
            report["results"][name] = "start: %d %s" % (status, body[:200])
            continue
        kernel_id = json.loads(body)["id"]
        try:
            report["results"][name] = asyncio.run(client.run(kernel_id, args.code))
        finally:
            client.request("DELETE", "/api/kernels/" + kernel_id)
    print(json.dumps(report, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
